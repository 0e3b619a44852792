"""Is an episode's bag fit to train on? PASS/FAIL with reason codes (SPEC §7, docs/validate.md).

- `validator`: the `validate` verb — every bag checked (in parallel), rejects quarantined;
- `checks`: the checks, on stamps and on content; `reasons`: the codes and their thresholds;
- `decode`: the one decode path of an episode, shared with `convert`;
- `timebase`: which clock the stamps are on and whether the system clock stepped;
- `camera_lag`: a camera's lag behind the joints, measured from the images;
- `episode_columns`: the validation columns `convert` writes beside LeRobot's own;
- `dataset_record`: a dataset's validation record (its verdicts, in pieces an append adds to).
"""
