"""How often does the speed gate decide, and how often wrongly? Its rule replayed window by window, beside
what the gate itself states (campaign/gates/speed/power.py), with the noise measured here.

The noise is read from real bundles' control boots, kept in ``benchmarks/data/speed_noise.json`` (the
per-boot, per-prompt tok/s of every speed level with 3+ control boots, with the machine, engine, model and
date they were measured on), so a clone reproduces the README's table; ``--bundle`` reads other bundles
instead and ``--extract`` writes their figures to that file. With no figures it refuses to run, unless
``--assume-noise`` says to simulate a stated, made-up noise. Per level, the control boots' log values give

* boot-to-boot SD: the scatter of each boot's mean over prompts around a straight drift line;
* prompt SD: what is left per prompt and boot once the boot and the prompt are taken out (the
  rep-to-rep noise inside one boot's median is part of it);
* drift: the slope per boot position.

Then many windows are drawn from that model with a known true change (A/A, +5%, +10%, +25%) and judged
through the gate's own functions (sequential.estimate and look, the interleaved schedule, a look after each
pair from the second at its Bonferroni share), for three rules (the demo's +5% bar, "faster at all" at +2%,
not-worse at -3%) under each futility rule: none, ``reach`` (0.2's) and ``conditional_power`` (the default,
``--min-conditional-power``). Printed per cell: PASS / FAIL / INCONCLUSIVE, mean pairs and minutes (at
``--boot-seconds`` a boot), beside the gate's statement for the same rule; last, how far the statements are
from the replays. A/A PASS is the false-positive rate; nominal is 2.5% (one side of a 95% two-sided CI).

    python benchmarks/speed_power.py --boot-seconds 28            # the README's figures (the committed noise)
    python benchmarks/speed_power.py --bundle runs/W1 --bundle runs/W2 --extract   # new noise from bundles
    python benchmarks/speed_power.py --assume-noise --boot-sd 0.03 --prompt-sd 0.02  # a noise of your own
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from campaign.gates.speed.power import DesignSimulation, Noise, RuleShape, conditional_decision  # noqa: E402
from campaign.gates.speed.sequential import BootValues, estimate, look, look_confidence, reachable  # noqa: E402

EFFECTS = (0.0, 0.05, 0.10, 0.25)


DATA = Path(__file__).resolve().parent / "data" / "speed_noise.json"


def levels_from_bundles(paths: list[Path]) -> list[dict]:
    """Every speed level with 3+ control boots on 2+ prompts: its control boots' tok/s, boots x prompts."""
    found = []
    for path in paths:
        # one candidate's result per gate: every candidate's result repeats the same control boots
        for result in [next(iter(sorted(d.glob("*.json"))), None) for d in sorted((path / "gates").glob("speed*"))]:
            if result is None:
                continue
            levels = json.loads(result.read_text()).get("details", {}).get("levels", {})
            for level, entry in levels.items():
                rows = entry.get("prompts") or []
                roles = [k for k in (rows[0] if rows else {}) if k == "control" or k.startswith("control_rerun")]
                table = [[row.get(role) for role in roles] for row in rows]
                table = [r for r in table if all(v and v > 0 for v in r)]
                if len(roles) < 3 or len(table) < 2:
                    continue
                found.append({"bundle": path.name, "gate": result.parent.name, "level": level,
                              "boots": [list(boot) for boot in zip(*table, strict=True)]})
    return found


def noise_from_levels(levels: list[dict]) -> dict[str, float] | None:
    """Pooled over the levels: boot-to-boot SD around the drift line, prompt SD, drift per position."""
    boot_var, prompt_var, drifts, weights = [], [], [], []
    for item in levels:
        y = np.log(np.array(item["boots"], dtype=float))  # boots x prompts
        means = y.mean(axis=1)
        position = np.arange(len(means), dtype=float)
        slope, intercept = np.polyfit(position, means, 1)
        boot_var.append(float(np.sum((means - (intercept + slope * position)) ** 2) / (len(means) - 2)))
        residual = y - means[:, None] - y.mean(axis=0)[None, :] + y.mean()
        prompt_var.append(float(np.sum(residual ** 2) / ((y.shape[0] - 1) * (y.shape[1] - 1))))
        drifts.append(float(slope) / 2)  # a control boot every second position
        weights.append(len(means))
    if not weights:
        return None
    w = np.array(weights, dtype=float)
    return {"boot_sd": math.sqrt(float(np.average(boot_var, weights=w))),
            "prompt_sd": math.sqrt(float(np.average(prompt_var, weights=w))),
            "drift": float(np.average(drifts, weights=w)), "levels": len(weights)}


def simulate_window(rng: np.random.Generator, effect: float, positions: int, prompts: int, noise: dict) -> np.ndarray:
    """Log values, boots x prompts, in window order; odd positions are the candidate's. ``effect_sd``: how
    much the true change differs from prompt to prompt (n-gram speculation helps a prompt that repeats
    its input and not one that does not), around ``effect``."""
    base = rng.normal(math.log(80), 0.2, prompts)
    per_prompt = math.log1p(effect) + rng.normal(0, noise.get("effect_sd", 0.0), prompts)
    y = np.empty((positions, prompts))
    for position in range(positions):
        shift = noise["drift"] * position + rng.normal(0, noise["boot_sd"])
        y[position] = base + shift + rng.normal(0, noise["prompt_sd"], prompts)
        if position % 2 == 1:
            y[position] += per_prompt
    return y


def replay(rng: np.random.Generator, effect: float, noise: dict, rule: RuleShape, futility: str,
           min_power: float = 0.10) -> tuple[str, int]:
    """One window through the gate's own functions: looks after pair 2, 3, ... with the Bonferroni share,
    stopping at the first decision, or for futility (``reach``: no number of pairs could decide;
    ``conditional_power``: the remaining pairs would decide in under ``min_power`` of continuations)."""
    prompts = rule_prompts(noise)
    y = simulate_window(rng, effect, 2 * rule.max_boot_pairs + 1, prompts, noise)
    confidence = look_confidence(rule.confidence, rule.max_boot_pairs)
    ids = [f"p{i}" for i in range(prompts)]
    boots = [BootValues(f"b{k}", k, k % 2 == 1, dict(zip(ids, np.exp(y[k]), strict=True))) for k in range(len(y))]
    for pairs in range(2, rule.max_boot_pairs + 1):
        seen = boots[:2 * pairs + 1]
        est = estimate(seen, higher_is_better=True, confidence=confidence)
        decided = look(est, min_mean_change=rule.min_mean_change, ci_lower_above=rule.ci_lower_above)
        if decided.verdict:
            return decided.verdict, pairs
        if pairs == rule.max_boot_pairs:
            break
        if futility == "reach" and not any(reachable(est, min_mean_change=rule.min_mean_change,
                                                     ci_lower_above=rule.ci_lower_above)):
            return "INCONCLUSIVE", pairs
        if futility == "conditional_power":
            chance = conditional_decision(seen, rule, pairs_done=pairs, higher_is_better=True)
            if chance is not None and sum(chance) < min_power:
                return "INCONCLUSIVE", pairs
    return "INCONCLUSIVE", rule.max_boot_pairs


def rule_prompts(noise: dict) -> int:
    return int(noise["prompts"])


def rates(results: list[tuple[str, int]]) -> dict[str, float]:
    verdicts = [v for v, _ in results]
    return {**{k: verdicts.count(k) / len(results) for k in ("PASS", "FAIL", "INCONCLUSIVE")},
            "pairs": statistics.fmean(p for _, p in results)}


def minutes(pairs: float, boot_seconds: float) -> float:
    return (2 * pairs + 1) * boot_seconds / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, action="append", help="bundles to read the noise from (instead of "
                                                                     "the committed figures)")
    parser.add_argument("--extract", action="store_true", help=f"write the --bundle figures to {DATA.name} and stop")
    parser.add_argument("--machine", default="", help="with --extract: the machine the bundles were measured on")
    parser.add_argument("--assume-noise", action="store_true",
                        help="simulate a made-up noise (boot SD 0.04, prompt SD 0.03, or --boot-sd/--prompt-sd) "
                             "when no measured figures are there")
    parser.add_argument("--runs", type=int, default=2000, help="windows replayed per cell (the README's: 2000)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-pairs", type=int, default=4)
    parser.add_argument("--boot-seconds", type=float, default=BOOT_SECONDS,
                        help="one boot of the demo's speed gate, measured (benchmarks/speed_windows.py)")
    parser.add_argument("--boot-sd", type=float, help="override the measured boot-to-boot SD (log)")
    parser.add_argument("--prompt-sd", type=float, help="override the measured prompt SD (log)")
    parser.add_argument("--effect-sd", type=float, default=0.0,
                        help="how much the true change varies from prompt to prompt (log SD)")
    parser.add_argument("--min-conditional-power", type=float, default=0.05, help="the futility threshold (the schema default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    noise = read_noise(args)
    rng = np.random.default_rng(args.seed)
    rules = {"the demo's: change >= +5%, CI low > 0": RuleShape(0.05, 0.0, 0.95, args.max_pairs),
             "faster at all: change >= +2%, CI low > 0": RuleShape(0.02, 0.0, 0.95, args.max_pairs),
             "not worse: change >= -3%, CI low > -3%": RuleShape(-0.03, -0.03, 0.95, args.max_pairs)}
    sim_noise = Noise(noise["boot_sd"], noise["prompt_sd"], noise["effect_sd"], args.prompts)
    worst = worst_cp = 0.0
    for title, rule in rules.items():
        print(f"\nrule: {title}; up to {rule.max_boot_pairs} pairs; futility: none / reach / conditional power "
              f"(< {args.min_conditional_power:.0%}); the gate's statement (simulated, no futility); minutes at {args.boot_seconds:.0f} s a boot")
        print(f"{'true change':>11} | {'PASS':>6} {'FAIL':>6} {'INC':>6} {'pairs':>5} {'min':>5} | "
              f"{'reach PASS':>10} {'FAIL':>6} {'pairs':>5} | {'CP PASS':>7} {'FAIL':>6} {'pairs':>5} {'min':>5} | "
              f"{'stated PASS':>11} {'FAIL':>6}")
        design = DesignSimulation(sim_noise, rule, runs=4000)
        for effect in EFFECTS:
            cells = {f: rates([replay(rng, effect, noise, rule, f, args.min_conditional_power) for _ in range(args.runs)])
                     for f in ("none", "reach", "conditional_power")}
            stated = design.outcome(effect)
            none, reach, cp = cells["none"], cells["reach"], cells["conditional_power"]
            worst = max(worst, abs(stated.pass_rate - none["PASS"]), abs(stated.fail_rate - none["FAIL"]))
            worst_cp = max(worst_cp, abs(stated.pass_rate - cp["PASS"]), abs(stated.fail_rate - cp["FAIL"]))
            print(f"{effect:>+11.0%} | {none['PASS']:>6.1%} {none['FAIL']:>6.1%} {none['INCONCLUSIVE']:>6.1%} "
                  f"{none['pairs']:>5.2f} {minutes(none['pairs'], args.boot_seconds):>5.1f} | "
                  f"{reach['PASS']:>10.1%} {reach['FAIL']:>6.1%} {reach['pairs']:>5.2f} | "
                  f"{cp['PASS']:>7.1%} {cp['FAIL']:>6.1%} {cp['pairs']:>5.2f} {minutes(cp['pairs'], args.boot_seconds):>5.1f} | "
                  f"{stated.pass_rate:>11.1%} {stated.fail_rate:>6.1%}")
        passed = design.change_passed()
        print(f"  the smallest true change this rule passes in 80% of windows: "
              f"{'out of reach' if passed is None else f'{passed:+.1%}'}")
    print(f"\nthe gate's statements against the replay: at most {100 * worst:.1f} points apart without futility, "
          f"{100 * worst_cp:.1f} with the conditional-power stop")


BOOT_SECONDS = 30.0


def read_noise(args: argparse.Namespace) -> dict:
    if args.bundle:
        levels, source = levels_from_bundles(args.bundle), f"{len(args.bundle)} bundle(s) given"
        if args.extract:
            _write_data(levels, args.bundle, args.machine)
            sys.exit(0)
    elif DATA.exists():
        data = json.loads(DATA.read_text())
        levels, source = data["levels"], f"{DATA.name} ({data['provenance']['summary']})"
    else:
        levels, source = [], "no figures"
    noise = noise_from_levels(levels)
    if noise is None:
        if not args.assume_noise:
            sys.exit(f"speed_power: no measured noise ({source}): give --bundle with speed windows of 3+ control "
                     f"boots, or --assume-noise to simulate a made-up one (printed)")
        noise = {"boot_sd": 0.04, "prompt_sd": 0.03, "drift": 0.0, "levels": 0}
        print("ASSUMED NOISE (--assume-noise): not measured; these figures describe no machine")
    noise["boot_sd"] = args.boot_sd if args.boot_sd is not None else noise["boot_sd"]
    noise["prompt_sd"] = args.prompt_sd if args.prompt_sd is not None else noise["prompt_sd"]
    noise["effect_sd"] = args.effect_sd
    noise["prompts"] = args.prompts
    print(f"noise: boot-to-boot SD {noise['boot_sd']:.3f}, prompt SD {noise['prompt_sd']:.3f}, drift "
          f"{noise['drift']:+.4f} per position (log), from {noise['levels']} level(s) of {source}; "
          f"the change's own SD over prompts {noise['effect_sd']:.3f}; "
          f"{args.prompts} prompts, {args.runs} windows per cell")
    return noise


def _write_data(levels: list[dict], bundles: list[Path], machine: str) -> None:
    """The figures the table is fitted on, with where they came from: bundle, gate, level, tok/s per boot and
    prompt, and the engine and model each bundle's control ran."""
    runs = {}
    for path in bundles:
        summary = json.loads((path / "SUMMARY.json").read_text())
        specs = [json.loads((path / "lanes" / name / "spec.json").read_text()) for name in sorted(summary.get("lanes", {}))
                 if (path / "lanes" / name / "spec.json").exists()]
        control = next((spec for spec in specs if spec.get("role") == "control"), {})
        runs[path.name] = {"started_at": summary.get("started_at"), "tool_version": summary.get("tool_version"),
                           "engine": control.get("engine"), "model": Path(str((control.get("model") or {}).get(
                               "path", ""))).name,
                           "engine_version": (summary.get("lanes") or {}).get(control.get("name"), {}).get(
                               "engine_version")}
    kept = [item for item in levels if item["bundle"] in runs]
    if not kept:
        sys.exit(f"speed_power: none of the {len(bundles)} bundle(s) has a speed level with 3+ control boots; "
                 f"{DATA.name} is left as it is")
    data = {"provenance": {"machine": machine, "bundles": runs,
                           "summary": f"{len(kept)} level(s) of {len({i['bundle'] for i in kept})} bundle(s), "
                                      f"{machine or 'machine not named'}"},
            "levels": kept}
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {DATA}: {data['provenance']['summary']}")


if __name__ == "__main__":
    main()
