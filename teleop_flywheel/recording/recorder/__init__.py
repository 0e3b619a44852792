"""The episode recorder without ROS: what the recorder node records, and how.

- `episode_recorder.EpisodeRecorder` (configured by its `RecorderConfig`): one bag per
  episode, start/stop/discard, drop counting and the episode's metadata;
- `verdict`: the verdict at stop beside the bag (`verdict.json`) and the operator's keep/discard;
- `spec_checks`: the task spec's start region and success predicate judged on the follower's pose;
- `clock_probe`: the rig's PTP/chrony offset through a fixed mechanism;
- `output_layout`: what lies where in a session's output folder, and what may not.
"""
