"""The winners' samples/s under the rule of the commit after these runs, from these runs' own files.

    python benchmarks/results/h200/scaleout_d/replay.py

These studies stated a winner's samples/s as the median of its two rounds. Since,
a cudnn.benchmark winner's trials count too (`autotune.search.typical_rate`). This
reads each study's winner and rounds from its log and the winner's trials from its
study file, and prints both numbers; nothing is measured again.
"""

from __future__ import annotations

import re
from pathlib import Path

import optuna

from autotune.config import Config
from autotune.search import typical_rate

HERE = Path(__file__).parent
WROTE = re.compile(r"wrote \S+: (.+?): ([\d,]+)/s, .* \(noise ±([\d.]+)%\)")
ROUND = re.compile(r"round \d+: +([\d,]+)/s  (.+)$")


def number(text: str) -> float:
    return float(text.replace(",", ""))


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for log in sorted(HERE.glob("host_*/*gpu*.log")):
        db = log.with_suffix(".db")
        text = log.read_text()
        wrote = WROTE.search(text)
        if wrote is None or not db.exists():
            continue
        winner, stated, noise = wrote.group(1), number(wrote.group(2)), wrote.group(3)
        rounds = [number(m.group(1)) for m in map(ROUND.search, text.splitlines()) if m and m.group(2).strip() == winner]
        storage = f"sqlite:///{db}"
        name = optuna.get_all_study_names(storage)[0]
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        draws = [t.value for t in trials if "duplicate_of" not in t.user_attrs and "config" in t.user_attrs
                 and Config.from_dict(t.user_attrs["config"]).describe() == winner]
        now = typical_rate([{"samples_per_s": r} for r in rounds], draws)
        print(f"{log.parent.name}/{log.stem:<12} stated {stated:>12,.0f}/s ±{noise}%  rounds {', '.join(f'{r:,.0f}' for r in rounds)}"
              f"  trials {', '.join(f'{d:,.0f}' for d in draws)}  ->  {now:,.0f}/s")


if __name__ == "__main__":
    main()
