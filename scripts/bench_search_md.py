"""The search benchmark's section for one space (scripts/bench_search.py writes the data).

    md = render(data)     # data: what bench_search.main writes to --json-out
"""

from __future__ import annotations

import math
from typing import Any

import bench_limits as bl
from bench_common import context_lines, markdown_table


def render(data: dict[str, Any]) -> str:
    f = data["truth"]
    lines = [f"### {data['title']} (`--bench {data['bench']}`)", "", *context_lines(data["context"]), ""]
    truth_how = ("each replay seed observes the runs of half of the measurement rounds (the same "
                 "rounds for every config, drawn by the seed) and is judged on the median of the "
                 "other half" if data["holdout"] else
                 "the truth is each config's median run and a replay may observe those same runs "
                 "(in-sample: this inflates pick accuracy of strategies that re-measure)")
    lines += [
        f"`{data['space']}`: {data['n_configs']} configs, built-in GPT `{data.get('preset', 'tiny')}`, seq_len "
        f"{data['seq_len']}, global batch {data['global_batch'] or 'free (accumulation is a dimension)'}; "
        f"{data['runs_per_config']}+ real runs per config (`{data['cache']}`, runner "
        f"{', '.join(f['runners'])}, last measured {f['measured_utc']}, 1-min load median "
        f"{num(f['load_median'])} / max {num(f['load_max'])} while measuring); {truth_how}. "
        f"Run-to-run spread of tokens/s ((max - min) / median of a config's runs): median "
        f"{f['median_spread']:.0%}, p90 {f['p90_spread']:.0%}. Median trial {f['trial_s_median']:.1f} s.",
        "",
        *hardness_lines(f),
        *([data["note"], ""] if data.get("note") else []),
        *peaks_lines(data.get("peaks_by_sharding")),
        limit_words(data) + (f", {f['n_oom']} configs OOM under it" if data["mem_limit_bytes"] else "")
        + f"; {f['n_failed']} configs failed for other reasons. Configs within 3% of a seed's cost "
          f"optimum: median {f['within_cost_median']:g}; {f['distinct_optima']} different optima over "
          f"the seeds (the held-out truth is itself a noisy median).",
        "",
        bl.place_sentence(data["optimum_place"]) if data.get("optimum_place") else "",
        "",
        f"Pick accuracy = seeds whose recommended config (the report's cheapest / fastest) is "
        f"within 3% of that seed's optimum, of {data['seeds']}. Regret = how much worse the pick is "
        f"than the optimum (median / worst). Trials and trial-s = what the strategy ran (repeats "
        f"included); reach = median trials / trial-s until it first *launched* a config within 3%.",
        "",
    ]
    rows = []
    for name, r in data["summary"].items():
        rows.append([name, f"{r['usd']['right']}/{r['seeds']}", f"{r['hours']['right']}/{r['seeds']}",
                     r["usd"].get("no_pick", "n/a"),
                     f"{r['usd']['regret_median']:.1%} / {r['usd']['regret_max']:.0%}",
                     r["trials_median"], r["repeats_median"], r["trial_s_median"],
                     f"{num(r['usd']['reach_trials'])} / {num(r['usd']['reach_trial_s'])} s"])
    lines.append(markdown_table(["strategy", "pick accuracy, cost", "pick accuracy, time", "seeds with no pick",
                                 "cost regret median / worst", "trials", "of which repeats",
                                 "trial-s", "reach (cost): trials / trial-s"], rows))
    lines += ["", f"Replays took {data['replay_s']:.0f} s."]
    return "\n".join(lines)


def peaks_lines(peaks: dict[str, float] | None) -> list[str]:
    if not peaks:
        return []
    return ["Measured peak per rank (median over the configs of each setting): "
            + ", ".join(f"{k} {v:,.0f} MiB" for k, v in peaks.items()) + ".", ""]


def limit_words(data: dict[str, Any]) -> str:
    """The memory limit a section was replayed under, in words."""
    if not data["mem_limit_bytes"]:
        return "No memory limit"
    how = (f"the {data['mem_limit_quantile']:g} quantile of the configs' measured peaks"
           if data.get("mem_limit_quantile") is not None else
           "a fixed figure, between FSDP2's and DDP's measured peaks")
    return f"Emulated memory limit: {data['mem_limit_bytes'] / 2**20:,.0f} MiB per rank ({how})"


def hardness_lines(f: dict[str, Any]) -> list[str]:
    """The noise against the gap a pick must resolve (see runs_to_separate)."""
    if f.get("runs_needed") is None:
        return []
    return [f"How hard: one run's sd of log tokens/s is {f['sd_log_run_median']:.3f} (median over "
            f"configs); the cheapest config outside 3% of the optimum costs "
            f"{math.expm1(f['gap_log_outside']):.1%} more. Telling those two apart 9 times in 10 "
            f"takes {f['runs_needed']} runs of each (n = 2 (1.28 sd / gap)^2), whatever the search"
            + (f"; at those two configs' own sd ({f['sd_log_pair']:.3f}, root mean square), "
               f"{f['runs_needed_pair']}." if f.get("runs_needed_pair") is not None else "."), ""]


def num(x) -> str:
    if x is None:
        return "n/a"
    return "never" if x == math.inf else f"{x:.3g}"
