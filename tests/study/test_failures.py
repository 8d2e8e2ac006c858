"""Which knob values cannot work: blame the value that explains the most code errors, never a bystander."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.study.failed.hopeless import Finished, blocks, hopeless_values
from autotune.study.planning.predict import PREDICTED
from autotune.study.trials import Learned, learn_failures, trained
from autotune.trial.capture import HOST_SYNC

VIEW = "error: RuntimeError: view size is not compatible with input tensor's size and stride"


def _t(n: int, ran: bool, reason: str | None = None, **config) -> Finished:
    return Finished(n, config, ran, reason)


def test_a_value_that_fails_every_time_is_hopeless() -> None:
    trials = [
        _t(0, True, channels_last=False, amp="off"),
        _t(1, False, VIEW, channels_last=True, amp="bf16"),
        _t(2, False, VIEW, channels_last=True, amp="fp16"),
        _t(3, False, VIEW, channels_last=True, amp="fp16"),
    ]
    (found,) = hopeless_values(trials)
    assert (found.values, found.trials) == ((("channels_last", True),), (1, 2, 3))
    assert found.describe() == f"channels_last=on failed in every trial that used it (1, 2, 3): {VIEW}"
    # amp=fp16 never ran either, but only ever beside channels_last: not blamed.
    assert blocks({"channels_last": False, "amp": "fp16"}, [found]) is None
    assert blocks({"channels_last": True, "amp": "off"}, [found]) is found


def test_one_failure_oom_or_timeout_is_not_enough() -> None:
    trials = [
        _t(0, True, batch_size=128),
        _t(1, False, VIEW, batch_size=8192),
        _t(2, False, "oom", batch_size=4096),
        _t(3, False, "oom", batch_size=4096),
        _t(4, False, "timeout: no result within 90 s", batch_size=2048),
        _t(5, False, "timeout: no result within 90 s", batch_size=2048),
    ]
    assert hopeless_values(trials) == []


def test_a_value_that_also_ran_is_never_hopeless() -> None:
    trials = [_t(0, False, VIEW, cuda_graph=True), _t(1, False, VIEW, cuda_graph=True), _t(2, True, cuda_graph=True)]
    assert hopeless_values(trials) == []


def test_true_and_one_are_different_values() -> None:
    trials = [
        _t(0, True, num_workers=1, pin_memory=False),
        _t(1, False, VIEW, num_workers=0, pin_memory=True),
        _t(2, False, VIEW, num_workers=2, pin_memory=True),
    ]
    (found,) = hopeless_values(trials)
    assert found.values == (("pin_memory", True),)


def test_one_host_sync_in_a_capture_stops_graphs_at_once_where_a_cuda_error_does_not() -> None:
    sync = f"{HOST_SYNC} (`.item()` at recipes/w.py, line 40: `scale = x.abs().max().item()`): a CUDA graph cannot wait"
    invalidated = "cuda error: CUDA error: operation failed due to a previous error during capture"
    trials = [
        _t(0, True, cuda_graph=False, batch_size=16),
        _t(1, False, invalidated, cuda_graph=True, batch_size=64),  # may be the rest of the config: not enough
    ]
    assert hopeless_values(trials) == []
    (found,) = hopeless_values([*trials, _t(2, False, sync, cuda_graph=True, batch_size=128)])
    assert (found.values, found.trials) == ((("cuda_graph", True),), (2,))
    assert found.describe() == f"cuda_graph=on cannot capture this workload's step (2): {sync}"
    assert blocks({"cuda_graph": True, "batch_size": 16}, [found]) is found
    assert blocks({"cuda_graph": False, "batch_size": 128}, [found]) is None


def test_between_values_that_explain_as_many_failures_the_error_s_origin_decides() -> None:
    """mnist_cnn on an H200: its first two failures had channels_last=on and prefetch_factor=4 both; prefetch_factor
    came first by name, and channels_last went on failing."""
    step = [_t(0, True, channels_last=False, prefetch_factor=2),
            _t(1, False, VIEW, channels_last=True, prefetch_factor=4),
            _t(2, False, VIEW, channels_last=True, prefetch_factor=4)]
    (found,) = hopeless_values(step)
    assert found.values == (("channels_last", True),)
    worker = "error: ValueError: cannot read sample 3 in DataLoader worker process 0 (tiny.py, line 56)"
    loader = [_t(0, True, channels_last=False, prefetch_factor=2),
              _t(1, False, worker, channels_last=True, prefetch_factor=4),
              _t(2, False, worker, channels_last=True, prefetch_factor=4)]
    (found,) = hopeless_values(loader)
    assert found.values == (("prefetch_factor", 4),)


def test_values_that_failed_only_together_are_blamed_together_until_a_failure_tells_them_apart() -> None:
    """mnist_cnn on an H200: its first two failures had channels_last=on and cudnn_benchmark=on both, the error came
    from the step, and blaming cudnn_benchmark (first by name) skipped the seed that had won before."""
    both = dict(channels_last=True, cudnn_benchmark=True, prefetch_factor=4)
    trials = [_t(0, True, channels_last=False, cudnn_benchmark=False, prefetch_factor=2),
              _t(1, False, VIEW, **both, amp="bf16"),
              _t(2, False, VIEW, **both, cuda_graph=True)]
    (found,) = hopeless_values(trials)
    assert (found.values, found.trials) == ((("channels_last", True), ("cudnn_benchmark", True)), (1, 2))
    assert found.short() == "channels_last=on with cudnn_benchmark=on failed together in every trial that used them " \
                            "all (1, 2)"
    assert blocks({"channels_last": False, "cudnn_benchmark": True, "cuda_graph": True}, [found]) is None
    assert blocks({"channels_last": True, "cudnn_benchmark": False}, [found]) is None
    assert blocks({"channels_last": True, "cudnn_benchmark": True, "prefetch_factor": 2}, [found]) is found
    # A failure with channels_last on and cudnn.benchmark off: channels_last explains all three, alone.
    (found,) = hopeless_values([*trials, _t(3, False, VIEW, channels_last=True, cudnn_benchmark=False)])
    assert (found.values, found.trials) == ((("channels_last", True),), (1, 2, 3))
    # A trial that ran cudnn.benchmark clears it: channels_last is left.
    (found,) = hopeless_values([*trials, _t(3, True, channels_last=False, cudnn_benchmark=True)])
    assert (found.values, found.trials) == ((("channels_last", True),), (1, 2))


def test_a_trial_skipped_by_prediction_did_not_train_its_config() -> None:
    """mnist_cnn on an H200: two configs with channels_last=on skipped by prediction cleared the value, and its
    failures were blamed on batch_size=4096 instead."""
    def finished(state: TrialState, reason: str | None) -> FrozenTrial:
        return optuna.trial.create_trial(state=state, user_attrs={"reason": reason}, value=1.0 if reason is None
                                         and state == TrialState.COMPLETE else None)

    assert trained(finished(TrialState.COMPLETE, None))
    assert trained(finished(TrialState.PRUNED, "pruned at window 2"))
    assert not trained(finished(TrialState.PRUNED, f"{PREDICTED}: its loader makes at most 80,836/s"))
    assert not trained(finished(TrialState.FAIL, VIEW))


def test_the_sampler_stops_proposing_a_value_blamed_alone_and_keeps_proposing_values_blamed_together() -> None:
    def study_with(*failed: dict) -> optuna.Study:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"config": {"channels_last": False,
                                                                                    "cudnn_benchmark": False}}))
        for config in failed:
            study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL,
                                                      user_attrs={"config": config, "reason": VIEW}))
        return study

    both = {"channels_last": True, "cudnn_benchmark": True}
    domains = {"channels_last": [False, True], "cudnn_benchmark": [False, True]}
    for failed, fixed in [((both, both), False), ((both, both, {**both, "cudnn_benchmark": False}), True)]:
        study, lines = study_with(*failed), []
        setup = SimpleNamespace(study=study, echo=lines.append, space=SimpleNamespace(domains=domains))
        own = study.sampler
        learn_failures(setup, Learned(sampler=own))
        assert len(lines) == 1 and lines[0].startswith("  not trying again: ")
        asked = {study.ask({k: CategoricalDistribution(v) for k, v in domains.items()}).params["channels_last"]
                 for _ in range(16)}
        if not fixed:
            assert study.sampler is own and asked == {False, True}  # blamed together: each value is still proposed
        else:
            assert asked == {False}  # channels_last blamed alone: never proposed again
