"""A workload's failures belong to its content: fixed, it is measured again in the study named, and the run says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune.config import Config
from autotune.options import SearchOptions
from autotune.parity.run import ParityRun
from autotune.procs.trial_process import Outcome
from autotune.study import SearchError, pools, search
from autotune.study.failed.content import digest, workload_files

BROKEN = "\nBROKEN = True  # the fake trial fails while the workload says this\n"


class ContentPool:
    """Trials without processes: a config fails while its workload file is broken, else runs at a known speed."""

    startup_s = 0.0  # no process starts here: nothing to reserve for a round's

    def __init__(self, workload_path: Path, *args: object, **kwargs: object) -> None:
        self.workload_path = workload_path

    def run(
        self, config: Config, lr: float, windows: object = None, on_window: object = None, fresh: bool = False,
        give_up_s: float | None = None, limit_s: float | None = None,
    ) -> Outcome:
        if "BROKEN = True" in Path(self.workload_path).read_text():
            return Outcome("failed", reason="error: ValueError: cannot read sample 3")
        rate = config.batch_size * 100.0 + config.num_workers * 10.0
        result = dict(samples_per_s=rate, steady_samples_per_s=rate, spread=0.01, step_s=config.batch_size / rate,
                      epoch_s=512 / rate, setup_s=0.5, materialize_s=0.0, stopped_early=False)
        return Outcome("complete", result=result, windows=(rate,))

    def parity_run(self, config: Config, lr: float, samples: int, probe_batch: int, timeout_s: float,
                   probe_samples: int | None = None) -> Outcome:
        return Outcome("complete", result=ParityRun(config.batch_size, lr, 2.0, 1.0, (samples,), (1.0,), True,
                                                    0.1).as_dict())

    def parts(self, config: Config, lr: float, which: list[str], timeout_s: float) -> Outcome:
        return Outcome("failed", reason="error: no parts in this fake")  # every config runs end to end

    def prestart(self, n: int) -> None:
        pass

    def ask_to_exit(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        pass


def test_a_fixed_workload_is_measured_again_and_the_run_says_so(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pools, "TrialPool", ContentPool)
    workload = project / "recipes" / "tiny.py"
    fixed = workload.read_text()
    workload.write_text(fixed + BROKEN)
    options = SearchOptions(trials=4, parity_check=False)
    for _ in range(2):  # unchanged, the rerun repeats the failure without measuring again
        lines: list[str] = []
        with pytest.raises(SearchError, match=r"cannot read sample 3\. Fix the workload first"):
            search("tiny", options, echo=lines.append)
        assert not any("changed since" in line for line in lines)

    workload.write_text(fixed)
    lines = []
    # Named with --study (without it, the fixed workload gets a study of its own: tests/study/test_identity.py), the
    # study that measured the broken file is resumed, and its failures are measured again.
    profile = search("tiny", dataclasses.replace(options, study="tiny@cpu"), echo=lines.append).profile
    assert (
        f"workload {workload} changed since trial(s) 0 failed: measuring their config(s) again (1 file(s) read)"
    ) in lines
    # The baseline's config, queued again first (as a dead worker's trial would be), measured this time: trial 1, as
    # no other ticket was queued while the baseline failed.
    assert any(
        line.startswith("[  1/4]") and "trial 1          1,600/s ±1.0%" in line and "bs=16 workers=0" in line
        for line in lines
    ), lines
    assert profile["trials_failed"] == 0  # the failure of the old file no longer counts


def test_the_digest_covers_the_files_a_workload_imports_from_its_folder(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 4\n")
    (tmp_path / "helpers.py").write_text("import torch\nfrom pkg import layers\n")
    (tmp_path / "other.py").write_text("SIZE = 1\n")
    workload = tmp_path / "w.py"
    workload.write_text("import helpers\nimport os\n")
    assert workload_files(workload) == sorted(
        [workload, tmp_path / "helpers.py", tmp_path / "pkg" / "__init__.py", tmp_path / "pkg" / "layers.py"]
    )
    before = digest(workload)
    (tmp_path / "other.py").write_text("SIZE = 2\n")  # not imported: not the workload's
    assert digest(workload) == before
    (tmp_path / "pkg" / "layers.py").write_text("WIDTH = 8\n")  # imported through helpers
    assert digest(workload) != before
