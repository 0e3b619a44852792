"""The review page (`teleop-flywheel review DIR`): a person looks at the validator's verdicts with their own
eyes — every episode with its codes, the video and plots placed at the failing instant — and confirms or
overrules them from the keyboard into an append-only review log beside the data. ROS-free: it reads the
bags and records `validate` wrote (`data/validate/`); the page's files ship in `assets/` (no CDN).
"""
