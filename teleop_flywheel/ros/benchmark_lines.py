"""The README's benchmark lines, one per `bench/results/<name>.json`: what the benchmark measures,
its target (SPEC §9) and its figures, each formatted from the result file by `BENCH_LINES`
(`reference.render_readme` writes them into the README's generated block)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


# bench/scale.py's FAMILIES, and its dataset family at 1,000 frames per episode (10 million frames at 10,000)
SCALE_FAMILIES = ("lineage", "dataset", "dataset_1000f", "review", "bags", "append", "files")


def _scale_fits(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """bench/scale.py's fits of every family it ran, by the cost's short name (a dataset family at other than
    100 frames per episode: with its frames, `audit@1000f`)."""
    out: dict[str, dict[str, Any]] = {}
    for fam in SCALE_FAMILIES:
        if fam not in d:
            continue
        frames = d[fam].get("frames_per_episode", 100)
        for key, f in d[fam]["fits"].items():
            short = key.removesuffix("_ms_per_episode").removesuffix("_ms_per_entry").removesuffix("_ms")
            out[short if frames == 100 else f"{short}@{frames}f"] = f
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _fb(d: dict[str, Any], scenario: str, mode: str, figure: str, unit: str = "") -> str:
    """`feedback`'s figure without feedback → with `mode`."""
    return f"{d[scenario]['off'][figure]:.2f} → {d[scenario][mode][figure]:.2f}{unit}"


# bench/results/<name>.json -> its README line: what it measures, the target, the figure
BENCH_LINES: dict[str, Any] = {
    "bus_loop": lambda d: (
        f"`bus_loop` (leader sync-read + follower sync-write, two simulated 1 Mbaud buses): target ≥ 500 Hz, "
        f"p99 jitter ≤ 1 ms, faster than the vendor SDK; {d['ours']['free_running_hz']:.0f} Hz free-running "
        f"({d['ours']['ratio_to_wire_limit']:.2f} of the wire limit), paced 500 Hz p99 jitter "
        f"{d['ours']['paced_500hz']['jitter_p99_ms']:.2f} ms, {d['ratio_ours_to_vendor']:.2f}× the SDK "
        f"({_met(d['ours']['paced_500hz']['jitter_p99_ms'] <= 1.0)}; vs the SDK "
        + (
            "faster"
            if d["ratio_ours_to_vendor"] > 1.05
            else "level"
            if d["ratio_ours_to_vendor"] >= 0.95
            else "**slower**: a read carries a few bytes more so no late or duplicated reply passes as fresh"
        )
        + ")"
        + (
            "; behind real adapters (free-running / a 200 Hz loop): "
            + ", ".join(
                f"{name} {a['free_running_hz']:.0f} / {a['paced_200hz_achieved_hz']:.0f} Hz"
                for name, a in d["adapters"].items()
            )
            if "adapters" in d
            else ""
        )
    ),
    "stamp_error": lambda d: (
        f"`stamp_error` (recorded stamp vs capture time, {d['injected_latency_ms']:g} ms injected latency): target "
        f"≤ 1 ms median, ≤ 2 ms p99; {d['source_stamping']['median_ms']:g} / {d['source_stamping']['p99_ms']:g} ms "
        f"(callback stamping: {d['callback_stamping_baseline']['median_ms']:g} ms) "
        f"({_met(all(d['targets'].values()))})"
        + (
            "; bus stamps vs the servos' latch, median/p99: "
            + ", ".join(
                f"{name} {b['stamp_error']['median_ms']:.2f}/{b['stamp_error']['p99_ms']:.2f} ms (by arrival: "
                f"{b['arrival_stamp_baseline']['median_ms']:.1f})"
                for name, b in d["bus_stamps"].items()
            )
            if "bus_stamps" in d
            else ""
        )
    ),
    "rig_cpu": lambda d: (
        f"`rig_cpu` (an arm driver's CPU per tick against a bare loop doing the same transactions at "
        f"{d['driver']['rate_hz']:g} Hz; CPU per node in a recording sim session): target ≤ 1.5× the floor; follower "
        f"{d['driver']['follower_arm']['us_per_tick']['median']:.0f} vs "
        f"{d['driver']['floor_follower']['us_per_tick']['median']:.0f} "
        f"µs/tick, {d['driver']['ratio_follower']['median']:.2f}× "
        f"({_met(d['driver']['ratio_follower']['median'] <= 1.5)}), "
        f"leader {d['driver']['ratio_leader']['median']:.2f}× ({_met(d['driver']['ratio_leader']['median'] <= 1.5)})"
        + (
            f"; session {sum(n['cpu_pct']['median'] for n in d['session']['per_node'].values()):.0f} % of one core"
            if "session" in d
            else ""
        )
        + (
            f"; the leader with feedback `gripper` {d['feedback']['ratio_gripper_vs_off']['median']:.1f}×, "
            f"`contact` {d['feedback']['ratio_contact_vs_off']['median']:.1f}× its CPU per tick without "
            f"({d['feedback']['cpu_pct']['contact']['median']:.0f} vs {d['feedback']['cpu_pct']['off']['median']:.0f} "
            "% of one core)"
            if "feedback" in d
            else ""
        )
    ),
    "soft_start": lambda d: (
        f"`soft_start` (a follower's first command 1.5 rad away, peak joint speed at the servo): target ≤ the "
        f"configured {d['configured_speed_rad_s']:g} rad/s + 5 %, commanded and at the shaft; "
        f"commanded {d['default']['commanded_peak_rad_s']:.2f} rad/s, "
        f"shaft {d['default']['shaft_peak_rad_s']:.2f} rad/s, there in {d['default']['time_to_target_s']:.2f} s "
        f"(before: commanded {d['baseline_0.05_rad_per_tick_acc254']['commanded_peak_rad_s']:.1f} rad/s, shaft at the "
        f"servo's {d['baseline_0.05_rad_per_tick_acc254']['shaft_peak_rad_s']:.1f} rad/s top speed) "
        f"({_met(d['met'])})"
    ),
    "safety": lambda d: (
        f"`safety` (the follower through each fault, SPEC §3): target a blocked joint held ≤ 0.1 s, torque off "
        f"after a replug while e-stopped, no EEPROM write loop, a raised arm parked at shutdown (not dropped), "
        f"the short way at the wrist_roll seam, a dead pedal held within its {d['pedal_loss']['pedal_timeout_ms']:g} "
        f"ms timeout; blocked shoulder_pan held "
        f"{d['collision']['time_to_hold_s']:.2f} s after full load (the servo alone: "
        f"{d['baseline_servo_alone']['time_at_cap_until_the_servo_trips_s']:.1f} s at the cap until its overload "
        f"trip), torque on after a replug while e-stopped: "
        f"{sum(d['estop_replug']['torque_after_replug'].values())} of 6, a rebooted servo named in "
        f"{d['reboot']['time_to_hold_s']:.2f} s as it fell, a 9 V sag held in "
        f"{d['supply_sag']['time_to_hold_s']:.2f} s, EEPROM writes per minute after a refused write "
        f"{d['eeprom_refused']['eeprom_writes_per_minute_after']:g}, a raised shoulder at shutdown parked in "
        f"{d['shutdown']['park']['time_to_rest_s']:.2f} s at ≤ {d['shutdown']['park']['peak_joint_speed_rad_s']:.1f} "
        f"rad/s (released at once, the old default: fell {d['shutdown']['release']['shoulder_fell_limp_rad']:.2f} "
        f"rad), the follower's wrist within "
        f"{d['wrist_roll_seam']['follower_farthest_from_the_seam_steps']} steps of the seam, a killed pedal node "
        f"held in ≤ {max(d['pedal_loss']['time_to_hold_ms']):.0f} ms "
        f"({_met(d['met'])})"
    ),
    "handover": lambda d: (
        f"`handover` (peak command jerk across a takeover, blended vs hard switch; teleop latency): target ≥ "
        f"{d['target_ratio_min']:g}× smoother, p99 ≤ {d['target_latency_p99_ms']:g} ms; "
        f"{d['smoothness_ratio']:.0f}× smoother, p99 {d['teleop_latency']['to_tick_stamp']['p99_ms']:.1f} ms "
        f"(load {d['load_average_1min_before']:.1f}) "
        + "(" + _met(d['smoothness_ratio'] >= d['target_ratio_min']
                     and d['teleop_latency']['to_tick_stamp']['p99_ms'] <= d['target_latency_p99_ms']) + ")"
    ),
    "ingest": lambda d: (
        f"`ingest` (stop → frames in the dataset with `ingest` watching, a {d['episode_s']:g} s one-camera episode "
        f"recorded in real time, the verdict at stop and the keep included): target ≤ 2× its convert time, ≤ 15 s; "
        f"{d['stop_to_frames_s']:.1f} s, {d['ratio_to_convert']:.2f}× the {d['convert_s']:.1f} s convert, the camera "
        f"encoded while it recorded ({_met(d['ratio_to_convert'] <= 2)} / {_met(d['stop_to_frames_s'] <= 15)}; "
        f"encoding after the stop instead: {d['after_stop']['stop_to_frames_s']:.1f} s)"
    ),
    "recorder": lambda d: (
        f"`recorder` (3 cameras 640×480 @ 30 fps + 4 × 500 Hz streams, {d['duration_s']:g} s): target 0 drops, ≥ 5× "
        f"the headroom of a deserialize/re-serialize recorder; {d['ours']['dropped_total']} dropped of "
        f"{d['load']['published_total']:,}, {d['headroom_ratio']:g}× end to end "
        f"({d['recording_path_only']['ratio']:g}× on the recording path alone) "
        f"({_met(d['ours']['dropped_total'] == 0)} / {_met(d['headroom_ratio'] >= 5)})"
    ),
    "camera_lag": lambda d: (
        f"`camera_lag` (a camera's lag behind the joints from its images, {d['summary']['episodes']} episodes of "
        f"the rig's motion, {d['summary']['episode_s']:g} s, a {d['summary']['camera'].split()[0]} camera, skews "
        f"{'/'.join(sorted({k.lstrip('+-') for k in d['summary']['per_skew']}, key=float)).replace('/', '/±')} ms "
        f"and restart sessions): "
        f"targets no clean episode rejected, ≥ 95 % of skews ≥ 35 ms rejected alone, ≥ 90 % of 25 ms through the "
        f"pool, ≤ 5 % cannot tell, 95 % intervals cover ≥ 90 %, a restart rejects 6–10 and keeps 1–5; "
        f"{d['summary']['clean_rejected']['n']}/{d['summary']['clean_rejected']['of']} clean rejected "
        f"({_met(d['summary']['clean_rejected']['n'] == 0)}), "
        + (f"{d['summary']['short_clean_rejected']['n']}/{d['summary']['short_clean_rejected']['of']} clean 3–7 s "
           f"episodes rejected ({_met(d['summary']['short_clean_rejected']['n'] == 0)}), "
           if d['summary']['short_clean_rejected']['of'] else "")
        + f"{d['summary']['skew_ge_35_rejected_on_own']['n']}/{d['summary']['skew_ge_35_rejected_on_own']['of']} "
        f"≥ 35 ms ({_met(d['summary']['skew_ge_35_rejected_on_own']['share'] >= 0.95)}), "
        f"{d['summary']['skew_25_rejected_with_pool']['n']}/{d['summary']['skew_25_rejected_with_pool']['of']} "
        f"25 ms pooled ({_met(d['summary']['skew_25_rejected_with_pool']['share'] >= 0.9)}), "
        f"{d['summary']['cannot_tell_moving_ge_2s']['n']}/{d['summary']['cannot_tell_moving_ge_2s']['of']} "
        f"cannot tell ({_met(d['summary']['cannot_tell_moving_ge_2s']['share'] <= 0.05)}), "
        f"coverage {d['summary']['covered_95']['share']:.1%} ({_met(d['summary']['covered_95']['share'] >= 0.9)}), "
        f"restarts as expected {d['summary']['restart_as_expected_with_id']}/{d['summary']['restart_sessions']} "
        f"with the instance id, {d['summary']['restart_as_expected_without_id']}/{d['summary']['restart_sessions']} "
        f"without ({_met(d['summary']['restart_as_expected_with_id'] == d['summary']['restart_sessions'])})"
        + "".join(f"; {m} motion: {x['clean_rejected']['n']}/{x['clean_rejected']['of']} clean rejected, "
                  f"{x['skew_ge_35_rejected_on_own']['n']}/{x['skew_ge_35_rejected_on_own']['of']} ≥ 35 ms, "
                  f"{x['skew_25_rejected_with_pool']['n']}/{x['skew_25_rejected_with_pool']['of']} 25 ms pooled, "
                  f"{x['cannot_tell_moving_ge_2s']['n']}/{x['cannot_tell_moving_ge_2s']['of']} cannot tell"
                  for m, x in d["summary"].get("per_motion", {}).items() if m != "policy")
    ),
    # the same benchmark at the demo's camera size (`bench/camera_lag.py --camera 320x240`): folded into its line
    "camera_lag_320x240": lambda d: (
        f"at the demo's {d['summary']['camera'].split()[0]} ({d['summary']['seeds']} seeds): "
        + ", ".join(f"{m} {x['clean_rejected']['n']}/{x['clean_rejected']['of']} clean rejected, "
                    f"{x['skew_ge_35_rejected_on_own']['n']}/{x['skew_ge_35_rejected_on_own']['of']} ≥ 35 ms, "
                    f"{x['cannot_tell_moving_ge_2s']['n']}/{x['cannot_tell_moving_ge_2s']['of']} cannot tell"
                    for m, x in d["summary"]["per_motion"].items())
    ),
    "convert": lambda d: (
        f"`convert` (bag → LeRobot v3.0, {d['resolution']} @ 30 fps, {d['frames']} frames): target ≤ "
        f"{d['target_ratio_max']:g}× PyAV encode-only with the same settings, the ratio to LeRobot 0.4.4's writer "
        f"reported; {d['ours_fps']:g} frames/s, {d['ratio_ours_over_pyav_floor']:.2f}× encode-only "
        f"({_met(d['ratio_ours_over_pyav_floor'] <= d['target_ratio_max'])}), "
        + (f"{d['ratio_lerobot_over_ours']:g}× faster than LeRobot's writer" if "ratio_lerobot_over_ours" in d
           else "LeRobot's writer not measured")
    ),
    "export": lambda d: (
        f"`export` (dataset → other stacks' formats, {d['frames']} frames {d['resolution']} from "
        f"{d['source_codec']}, one process): target ≤ {d['target_ratio_max']:g}× reading the source plus the "
        f"writer's floor; reading alone {d['read_floor_fps']:g} frames/s; "
        + ", ".join(f"{name} {f['export_fps']:g} frames/s, {f['ratio_export_over_floor']:.2f}× "
                    f"({_met(f['ratio_export_over_floor'] <= d['target_ratio_max'])})" if isinstance(f, dict)
                    else f for name, f in d["formats"].items())  # a string: the format was skipped, and why
        + "; `--workers 2` " + ", ".join(f"{name} {f['speedup_workers_2']:g}×" for name, f in d["formats"].items()
                                         if isinstance(f, dict) and "speedup_workers_2" in f)
        + f" the speed of one (load {d['load_average_before'][0]:.1f} on {d['cpus']} cores)"
    ),
    "verdict": lambda d: (
        f"`verdict` (stop → the recorder's verdict at stop, a {d['episode_s']:g} s one-camera episode, the validator "
        f"in a worker process): target ≤ 5 s; {d['idle']['stop_to_verdict_s']:.1f} s, "
        f"{d['busy']['stop_to_verdict_s']:.1f} s while the next episode records "
        f"({sum(d['busy']['next_episode']['drops'].values())} drops in it; load {d['load_average_before'][0]:.1f}) "
        f"({_met(d['met_idle'] and d['met_busy'])})"
    ),
    "loader": lambda d: (
        f"`loader` (LeRobot's DataLoader, batch {d['batch_size']}, {d['num_workers']} workers, pyav, against an ACT "
        f"training step on the CPU): target: the step never waits on decode; "
        + ", ".join(f"{name} {f['loader_samples_per_s']:g} samples/s vs the step's {f['step_samples_per_s']:g} "
                    f"({100 * f['training_loop_waiting_share']:.1f} % of the loop waiting)"
                    for name, f in d["forms"].items())
        + f" ({_met(all(f['ratio_loader_to_step'] >= 1 for f in d['forms'].values()))}; a GPU step faster than "
        f"the loader's rate would wait: `materialize --resolution` is the lever)"
    ),
    "rollout": lambda d: (
        f"`rollout` (a LeRobot ACT at its default size, {d['policy_input']} input from a {d['camera']} camera, "
        f"{d['torch_threads']} torch thread, drives the simulated rig on the CPU while it records, "
        f"{d['walk']['planned'] // 2} trials of {d['trial_s']:g} s, half with a scripted takeover; the scripted "
        f"policy interleaved in the same session): target every episode passes, takeovers included, no FRAME_GAP; "
        f"inference p50 "
        f"{d['act']['inference_ms']['p50']:g} ms, p99 {d['act']['inference_ms']['p99']:g} ms "
        f"({d['act']['late_actions']} of {d['act']['actions']} actions late, held); "
        f"{d['act']['passed']}/{d['act']['trials']} passed ({d['act']['rejection_codes'] or 'none'}), "
        f"{d['act']['takeover_trials_passed']}/{d['act']['takeover_trials']} with a takeover; scripted "
        f"{d['scripted']['passed']}/{d['scripted']['trials']} ({d['scripted']['rejection_codes'] or 'none'}); "
        f"episodes with a FRAME_GAP per recorded minute {d['act']['frame_gap_episodes_per_min']:g} (ACT) vs "
        f"{d['scripted']['frame_gap_episodes_per_min']:g} (scripted); "
        + ("" if d["walk"]["complete"] else f"the walk stopped after {d['walk']['recorded']} of "
           f"{d['walk']['planned']} trials; ")
        + f"load {d['load_average_before'][0]:g} ({_met(d['met'])})"
    ),
    "review": lambda d: (
        f"`review` (the review page in chromium, {d['episodes']:,} episodes): target list < 1 s, open < 1 s, "
        f"seek < 200 ms; {d['list_s']:.2f} s, {d['open_s']:.2f} s, {d['seek_ms']:.0f} ms medians "
        f"({_met(d['list_s'] < 1 and d['open_s'] < 1 and d['seek_ms'] < 200)}; load {d['load_average'][0]:.1f})"
    ),
    "scale": lambda d: (
        "`scale` (costs as the data grows, per episode or entry, N up to "
        + ", ".join(f"{fam} {max(p[d[fam]['size']] for p in d[fam]['points']):,}"
                    for fam in SCALE_FAMILIES if fam in d)
        + "): target the cost at the largest N within 1.3× of N = 100; "
        + "; ".join(f"`{key}` " + (f"{f['vs_100']:.2f}×" if f["vs_100"] is not None else "n/a")
                    + (f" ({f['exponent']:+.2f} ± {f['spread']:.2f})" if f["exponent"] is not None else "")
                    for key, f in _scale_fits(d).items())
        + f" ({_met(all(f['within_1_3x'] is not False for f in _scale_fits(d).values()))}; "
        f"load {d['load_average_before'][0]:.1f})"
    ),
    "long_recording": lambda d: (
        f"`long_recording` (the recorder over one episode of {d['minutes']:g} min: {d['streams']['camera']}, "
        f"{d['streams']['joints']}; killed at the end, then `recover`): target memory flat (≤ 1.1×), the bag "
        f"readable while it grows, `recover` < 10 s; RSS {d['rss_mb_first']:g} → {d['rss_mb_last']:g} MB "
        f"({d['rss_ratio_last_to_first']:.2f}×), readable while growing: "
        f"{'yes' if d['readable_while_growing'] else 'no'}, `recover` of {d['bag_mb']:,.0f} MB in "
        f"{d['recover_s']:.1f} s, {d['messages_lost']} of {d['messages_written']:,} messages lost "
        f"({_met(d['met'])}; load {d['load_average'][0]:.1f})"
    ),
    "feedback": lambda d: (
        "`feedback` (force feedback on the simulator: the modelled hand, a scripted operator who stops and eases "
        f"off once it feels {d['operator']['feel']:g} of max torque, {d['operator']['reaction_s']:g} s late; "
        "medians of 3 repeats): target pressing at least halved, free-motion drag within 10 %, stable, follower "
        "load → leader goal within two bus ticks; grasp without the follower's force limit, time pressing above "
        f"the grip limit {_fb(d, 'grasp_without_follower_force_limit', 'gripper', 'time_above_limit_s', ' s')} "
        f"({_met(d['met']['grasp_pressing_time_halved'])}), mean load over the contact "
        f"{_fb(d, 'grasp_without_follower_force_limit', 'gripper', 'mean_load')} "
        f"({_met(d['met']['grasp_mean_load_halved'])}), peak at {d['operator']['push_rad_s']:g} rad/s "
        f"{_fb(d, 'grasp_without_follower_force_limit', 'gripper', 'peak_load')} "
        f"({_met(d['met']['grasp_peak_load_halved'])}: the servo's cap, reached "
        f"{d['grasp_without_follower_force_limit']['gripper']['first_contact']['peak']['ms']:.0f} ms after contact, "
        "within the operator's reaction), by the squeeze's speed "
        + ", ".join(f"{s['rad_s']:g} rad/s {s['ratio']:.2f}×" for s in d["grasp_peak_by_squeeze_speed"])
        + f" (halved up to {d['met']['grasp_peak_load_halved_up_to_rad_s']:g} rad/s), at "
        f"{d['operator']['push_rad_s']:g} rad/s by the hand "
        + ", ".join(f"{h['hand'].replace('_', ' ')} {h['ratio']:.2f}×" for h in d["grasp_peak_by_hand"])
        + " (before the reaction only the trigger's push against the hand can stop it); with the follower's "
        "own force limit, the default soft hold, the follower is above the limit "
        f"{1000 * d['grasp']['gripper']['time_above_limit_s']:.0f} ms per grasp; "
        "push into a blocked joint, peak load "
        f"{_fb(d, 'push', 'contact', 'peak_load')} "
        f"({_met(d['met']['push_peak_load_halved'])}), mean load over the contact "
        f"{_fb(d, 'push', 'contact', 'mean_load')} ({_met(d['met']['push_mean_load_halved'])}), time above the "
        f"limit {_fb(d, 'push', 'contact', 'time_above_limit_s', ' s')} "
        f"({_met(d['met']['push_pressing_time_halved'])}: without feedback the collision hold ends it with a fault), "
        f"load above the limit integrated {_fb(d, 'push', 'contact', 'excess_load_s', ' load·s')} "
        f"({_met(d['met']['push_excess_load_halved'])}), "
        "against a follower without the collision hold (only the servo's overload trip ends a press) "
        f"{_fb(d, 'push_without_follower_collision_hold', 'contact', 'time_above_limit_s', ' s')} "
        f"({_met(d['met']['push_unheld_pressing_time_halved'])}), load above the limit integrated "
        f"{_fb(d, 'push_without_follower_collision_hold', 'contact', 'excess_load_s', ' load·s')} "
        f"({_met(d['met']['push_unheld_excess_load_halved'])}), the mash "
        f"{_fb(d, 'push', 'contact', 'mash_rad', ' rad')}; drag {d['ratios']['drag_gripper_vs_off']:.2f}× / "
        f"{d['ratios']['drag_contact_vs_off']:.2f}× (five starts each: "
        f"{min(d['ratios']['drag_contact_vs_off_seeds']):.2f}–{max(d['ratios']['drag_contact_vs_off_seeds']):.2f}× "
        f"`contact`; {_met(d['met']['drag_within_10_percent'])}); "
        f"{'stable' if d['met']['stable'] else 'oscillates'} ({_met(d['met']['stable'])}); latency over "
        f"{d['latency']['rendered']} grasps median {d['latency']['median']:.1f}, p95 {d['latency']['p95']:.1f}, "
        f"max {d['latency']['max']:.1f} ticks, {d['latency']['within_two_ticks']} within two "
        f"({_met(d['met']['latency_two_ticks'])}; threads at SCHED_FIFO {d['realtime']['priority']}, "
        f"{d['burners']} CPU burners beside, load {d['load_average'][0]:.1f}), max "
        f"{d['latency']['max_without_machine_stalls']:.1f} without the "
        f"{_count(len(d['latency']['during_machine_stalls']), 'grasp')} during which the machine stalled a probe "
        "of its own at that priority > 2 ms "
        f"({_met(d['met']['latency_two_ticks_without_machine_stalls'])}; meanwhile the probe's byte through a pty "
        f"took > 2 ms {d['latency']['machine']['tty_pass_over_2ms']} times, at most "
        f"{d['latency']['machine']['tty_pass_max_ms']:.0f} ms: the kernel's tty work at the normal policy; its "
        f"sleep woke > 2 ms late {d['latency']['machine']['late_over_2ms']} times, at most "
        f"{d['latency']['machine']['late_max_ms']:.0f} ms)"
    ),
    "audit": lambda d: (
        "`audit` (from numeric columns): target 12,000 frames < 1 s, 1,000,000 < 10 s; "
        + ", ".join(f"{r['frames']:,} frames {r['audit_s']:.2f} s" for r in d["results"].values())
        + f" ({_met(all(r['meets_target'] for r in d['results'].values()))})"
    ),
}


# results whose figures join another benchmark's line (the README has room for one line per benchmark)
FOLDED_LINES = {"camera_lag_320x240": "camera_lag"}


def benchmark_lines(results: Path = RESULTS) -> str:
    """One README line per `bench/results/*.json` (a result without a line here is an error); a
    `FOLDED_LINES` result is appended to its benchmark's line."""
    docs = {}
    for path in sorted(results.glob("*.json")):
        if path.stem not in BENCH_LINES:
            raise SystemExit(f"{path}: no README line for this benchmark; add one to BENCH_LINES in {__file__}")
        docs[path.stem] = json.loads(path.read_text())
    lines = []
    for name, doc in docs.items():
        if name in FOLDED_LINES:
            continue
        folded = [BENCH_LINES[sub](docs[sub]) for sub, into in FOLDED_LINES.items() if into == name and sub in docs]
        lines.append("- " + "; ".join([BENCH_LINES[name](doc), *folded]))
    return "\n".join(lines)
