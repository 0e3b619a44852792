"""Atomic commits to a LeRobot v3.0 dataset: versions published by one rename of a pointer.

LeRobot's reader globs `data/*/*.parquet` and `meta/episodes/*/*.parquet`, so a file is part of
the dataset the moment it is there, and it reads info.json, the tables and the data as separate
files. A commit therefore never changes a directory a reader may be reading. As table formats such
as Delta Lake and Iceberg commit, every change is a new version, published by one atomic rename:

    DATASET                  -> DATASET.versions/v000007   (a relative symlink: the pointer)
    DATASET.versions/v000006/  the previous version
    DATASET.versions/v000007/  the current one: meta/, data/, videos/, README.md ...

`DATASET` stays the path users give LeRobot as `root=`; it always names one complete version.
A commit (under the dataset's lock, `locked_dataset`):

1. `new_stage`: an empty staging directory `DATASET.versions/.staging/`; every new or replacing
   file is written there at its path relative to the dataset (the current version is only read);
2. `publish`: each file of the current version not written there (unchanged) is hard-linked into
   it, except the ones the commit drops; a new file must not exist in the current version (never
   overwritten); the written files and every directory are fsynced, the staging directory renamed
   to the next version `vNNNNNN`, and the pointer replaced: a symlink made under a temporary name,
   `os.replace`d onto `DATASET` (one rename), the parent directory fsynced. Cost: one hard link per
   file, no copy, but for closed chunks (below). A new dataset's
   first commit makes the pointer first (dangling: still no dataset), then renames the staging
   directory to `v000000`: the dataset appears whole.

Closed chunks: one-at-a-time ingests add a data parquet and an mp4 per camera each (10,000 ingests:
20,000 files with one camera), and linking every file into every version cost 0.31 s of CPU per
commit at 20,000. A chunk directory of `data/` or `videos/<key>/` with a later chunk beside it
(here or staged) is closed: appends write only in the last one. The first commit after it closes
links its files once into the shared store `DATASET.versions/.shared/vNNNNNN/<chunk path>` (named
after that commit's version); from then on the CURRENT version holds the chunk as a real directory
of the same files (the store entry's twin), and each commit moves that directory into its new
version with one `renameat2(RENAME_EXCHANGE)` against a relative symlink to the store entry it
staged in its place (the same text resolves from every version): the version it leaves behind gets
the symlink, the new one the directory, and no published version lacks the chunk at any moment. A
commit's links are so bounded by the open chunk (`chunks_size`, 1,000 files a kind), whatever the
dataset holds. Which entry a directory twins is known without listing it: the previous version's
symlink at that path names the entry, and the entry records the inode of its twin beside it
(`<chunk>.twin`, a symlink whose text is the inode: nothing is added inside a chunk directory,
which readers list); a directory of a version's own (a commit staged or dropped a file in it) has
another inode and is linked into a new entry once. A chunk symlink to anything but the store is
refused. Store entries no published version links (their versions collected, or a commit killed
between sharing and publishing) are removed by `collect` and `recover`; a commit killed after
taking directories from the current version leaves it symlinks (the same files): `recover` gives
the directories back first (`_swap_back`). So the current version is symlink-free, and an upload of
`DATASET` (huggingface_hub's `upload_folder`, so `huggingface-cli upload` and LeRobot's
`push_to_hub`, list it with Python's recursive glob, which skips directory symlinks) holds every
file. Where the filesystem has no RENAME_EXCHANGE (NFS, CIFS; `TELEOP_FLYWHEEL_NO_EXCHANGE=1`) every
later version, the current one too, carries the symlink instead (one `symlink` call): such an upload
would leave closed chunks out, so `upload_note` says to copy with `cp -rL` first (docs/convert.md).
A dataset whose current version carries symlinks (an older teleop-flywheel's, or moved from such a
filesystem) gets directories again at its next commit (one link per file, once).

A file is never written in place once it is in a version: versions share files by hard links,
and replacing one is writing a new file under another version's directory. So a reader that
resolves the pointer once (`snapshot`: our `LeRobotDataset.open`) sees the old version or the new
one, never a mix. A reader that opens `DATASET/...` path by path (LeRobot's loader given
`root=DATASET`) gets each file whole from a published version, but a commit landing between two
of its opens (its start-up reads info.json, the tables, then globs the data) gives it files of two
adjacent versions: seen in `test/data/lerobot/test_commit.py`, info.json and the episodes table
saying 5 episodes beside data files holding 6. Given the version itself (`pinned`) it reads one.

Reader leases: `pinned(DATASET)` resolves the pointer once and holds a shared `flock` on the
version's lease file `DATASET.versions/vNNNNNN.lease` until the block ends; the kernel releases it
when the process exits, however it dies, so a crashed reader never leaks a lease. `train`,
`manifest materialize` and the loader benchmark give LeRobot the pinned version folder this way.

Old versions: after a commit, a version older than the previous one is removed once it has not
been current for `KEEP_S` seconds (the previous version is always kept) and no reader leases it:
the collector takes the lease file's exclusive lock without waiting, and skips the version when a
reader holds it (a later commit collects it). A reader of `snapshot` (no lease) that outlives
`KEEP_S` keeps the files it opened (hard links: the data stays until closed); files it had not
opened yet are gone.

A crash (kill -9, power, full disk) before the pointer's rename leaves the dataset exactly as it
was (the old version); after it, the new version is whole. What a crash leaves beside the dataset
(the staging directory, a renamed version never published, a temporary pointer, an upgrade's old
directory, a new dataset's dangling pointer, the lease file of a version that is gone) or in it (a
`replace_atomic` temp file `.<name>.XXXXXXXX.tmp` of a derived file replaced in place, such as
`meta/validation/record.json`: never hard-linked into a next version) is never read by anyone;
`recover` removes it (every writer runs it first under the lock; `teleop-flywheel
doctor` reports it and `--repair` removes it). No journal, nothing to roll forward.

A dataset written before versions (a plain directory) is upgraded by the first commit: its files
are hard-linked into `v000000`, then the directory and a pointer to `v000000` swap names in one
`renameat2(RENAME_EXCHANGE)`, so a reader sees the plain directory or the same files through the
pointer. Where the filesystem has no RENAME_EXCHANGE (NFS, CIFS) the directory is renamed aside to
`DATASET.versions/.plain` and the pointer made in its place: between the two `DATASET` does not
exist. `snapshot` (and so `pinned` and `LeRobotDataset.open`) then reads `v000000`, the same files,
whole on disk before the directory moved; a process given the bare path (LeRobot's loader) fails
with "no such dataset" for those microseconds, never sees a mix. A kill there is completed forward
by the next writer's `recover` (or `doctor --repair`): the pointer is made, the directory removed.
`TELEOP_FLYWHEEL_NO_EXCHANGE=1` takes that path on any filesystem (the kill tests run both).

Fault injection (tests): `TELEOP_FLYWHEEL_FAULT_AT=N` kills this process with SIGKILL at the N-th
write step (`fault`); `TELEOP_FLYWHEEL_FAULT_LOG=FILE` appends every step's name to FILE.
"""
from teleop_flywheel.data.lerobot.commit.locks import locked_dataset, new_dataset
from teleop_flywheel.data.lerobot.commit.plain_upgrade import PLAIN
from teleop_flywheel.data.lerobot.commit.primitives import (
    FAULT_AT,
    FAULT_LOG,
    LEASE_SUFFIX,
    NO_EXCHANGE,
    VERSIONS_SUFFIX,
    current,
    fault,
    fsync_dir,
    fsync_tree,
    lease_path,
    staging_path,
    versions_path,
)
from teleop_flywheel.data.lerobot.commit.recovery import pending, recover, recover_all, related
from teleop_flywheel.data.lerobot.commit.store import SHARED, carried_chunks, shared_links, upload_note
from teleop_flywheel.data.lerobot.commit.versions import KEEP_S, collect, new_stage, pinned, publish, snapshot

__all__ = [
    "FAULT_AT", "FAULT_LOG", "KEEP_S", "LEASE_SUFFIX", "NO_EXCHANGE", "PLAIN", "SHARED", "VERSIONS_SUFFIX",
    "carried_chunks", "collect", "current", "fault", "fsync_dir", "fsync_tree", "lease_path", "locked_dataset",
    "new_dataset", "new_stage", "pending", "pinned", "publish", "recover", "recover_all", "related",
    "shared_links", "snapshot", "staging_path", "upload_note", "versions_path",
]
