"""ament_python package `teleop_flywheel`; also pip-installable into a plain venv.

`pip install -e ".[standalone,dev]"` brings the ROS 2 Kilted wheels for machines without a ROS
install; a real ROS install (colcon build) uses only the base dependencies.
"""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "teleop_flywheel"

NODES = ["arm_driver", "teleop", "pedal", "policy", "camera", "recorder", "ingest", "metrics"]

ROS_WHEELS = [
    "ros-kilted-rclpy",
    "ros-kilted-rmw-fastrtps-cpp",
    "ros-kilted-builtin-interfaces",
    "ros-kilted-std-msgs",
    "ros-kilted-std-srvs",
    "ros-kilted-sensor-msgs",
    "ros-kilted-diagnostic-msgs",
]

setup(
    name=PACKAGE,
    version="0.1.0",
    # config/ and urdf/ stay at the package root (ROS convention) and are also package data
    # `teleop_flywheel.config` / `.urdf` for pip installs (core/resources.py finds them either way).
    packages=find_packages(exclude=["test", "test.*", "bench", "config", "config.*", "urdf"])
    + [f"{PACKAGE}.config", f"{PACKAGE}.config.calibration", f"{PACKAGE}.urdf"],
    package_dir={f"{PACKAGE}.config": "config", f"{PACKAGE}.urdf": "urdf"},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.json") + glob("config/*.xml")),
        (f"share/{PACKAGE}/config/calibration", glob("config/calibration/*.yaml")),
        (f"share/{PACKAGE}/config/prometheus", glob("config/prometheus/*.yml")),
        (f"share/{PACKAGE}/config/prometheus/tests", glob("config/prometheus/tests/*.yml")),
        (f"share/{PACKAGE}/config/grafana", glob("config/grafana/*.json")),
        (f"share/{PACKAGE}/urdf", glob("urdf/*.urdf")),
    ],
    package_data={PACKAGE: ["py.typed"], f"{PACKAGE}.config": ["*.yaml", "*.json", "*.xml", "prometheus/*.yml",
                                                                "prometheus/tests/*.yml", "grafana/*.json"],
                  f"{PACKAGE}.config.calibration": ["*.yaml"], f"{PACKAGE}.urdf": ["*.urdf"],
                  f"{PACKAGE}.data.review": ["assets/*"]},  # the review page's own files (no CDN)
    python_requires=">=3.11",
    install_requires=[
        "numpy",
        "pyyaml",
        "pyserial",
        "mcap>=1.6",  # Writer.flush(): chunks closed on time (crash safety)
        "mcap-ros2-support",
        "zstandard",
        "lz4",
        "av",
        "pyarrow",
        "pandas",
        "opencv-python-headless",
        "matplotlib",
        "tqdm",
        "evdev; platform_system == 'Linux'",
        "foxglove-sdk",
        "rosbags",  # the reader decodes rare types (diagnostics) with its pure-Python deserializer
        "prometheus-client",  # every session's metrics endpoint (ros/nodes/metrics.py)
    ],
    extras_require={
        "standalone": ROS_WHEELS,
        "dev": ["pytest", "pytest-timeout", "pytest-xdist", "hypothesis", "feetech-servo-sdk", "websockets", "mypy", "ruff",
                "import-linter", "h5py",
                "playwright",  # the review page's tests drive Debian's chromium with it (test/data/review/)
                "grafanalib",  # config/grafana/dashboard.json is generated with it (fleet/dashboard.py)
                "colcon-common-extensions", "colcon-ros", "ros-kilted-ament-package", "ray"],
        "ray": ["ray"],
        # ALOHA/ACT episode files (`export --to hdf5-aloha`, `import --from hdf5-aloha`).
        "hdf5": ["h5py"],
        # RLDS / Open X-Embodiment datasets (`export --to rlds`), written with TFDS's own writer; ~1.4 GB.
        "rlds": ["tensorflow-cpu", "tensorflow-datasets>=4.9"],
        # The `lerobot` policy plugin (policies/lerobot_checkpoint.py); ~8 GB with torch, so never a base requirement.
        "lerobot": ["lerobot>=0.4,<0.5"],
    },
    zip_safe=True,
    maintainer="teleop_flywheel developers",
    description="SO-101 teleoperation, blended takeover, raw MCAP recording and a LeRobot data engine.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [f"{n} = {PACKAGE}.ros.nodes.{n}:main" for n in NODES]
        + [f"teleop-flywheel = {PACKAGE}.cli:main"],
        # Every policy registers here, built-ins too: name = "module:factory(args, checkpoint_id) -> Policy".
        "teleop_flywheel.policies": [f"{name} = {PACKAGE}.policies.{module}:make_policy" for name, module in
                                     (("scripted", "scripted"), ("replay", "recorded"), ("lerobot", "lerobot_checkpoint"))],
    },
)
