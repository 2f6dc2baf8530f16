"""A run folder, in one place: every path of a run (stage parts, removed documents, stage reports, a dedup pass's
work files, the manifest) is built here, and the manifest says what is done.

```
OUT/manifest.json        recipe, inputs, versions; per stage its config hash and finished shards with their stats
OUT/run.lock             while a `curate run` or `curate tokenize` writes the folder: its pid, start and host
OUT/<NN_stage>/part-S    a stage's kept documents, for the stages the run writes (a fused run writes only the
                         last stage before each dedup stage and the final one; --materialize-all writes every one)
OUT/removed/<NN_stage>/  with --keep-removed: the documents a stage dropped, with their drop_reason
OUT/reports/<NN_stage>/  a stage's report rows per shard, merged into OUT/<report name>.parquet at the end
OUT/work/<NN_stage>/     while a dedup stage's corpus-wide pass runs
```
"""

import os
import re
import time

import fsspec

from curation.io import read_json, remove_temporaries, write_json_atomic

MANIFEST = "manifest.json"
LOCK_FILE = "run.lock"  # held by the one `curate run` or `curate tokenize` writing the folder (shard_contract.folder_lock)
SAVE_SHARE = 0.05  # the most of the driver's time that saving the manifest as tasks finish may take
STAGE_DIR = re.compile(r"^\d{2}_[a-z0-9_]+$")  # 00_read, 07_dedup_exact, ...
STAGE_PLACES = ("", "removed/", "work/", "reports/")  # where a stage writes: its folder under each of these


def part_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


class RunFolder:
    def __init__(self, output: str, stage_dirs: list[str]):
        # no cached listings: the Ray workers write the run, so a listing the driver cached (s3fs, gcsfs) goes stale;
        # a resumed run would then not see a part a worker just wrote and would compute it again, round after round
        self.fs, root = fsspec.core.url_to_fs(output, use_listings_cache=False)
        self.root = root.rstrip("/")
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.prefix = "" if protocol in ("file", "local") else f"{protocol}://"
        self.stage_dirs = stage_dirs

    @staticmethod
    def unwritable(output: str) -> str | None:
        """Why a run cannot write into `output`, or None: a probe file written and deleted, with the folders made for it."""
        try:
            fs, root = fsspec.core.url_to_fs(output, use_listings_cache=False)
            made, parent = None, root.rstrip("/")
            while parent and not fs.exists(parent):
                made, parent = parent, parent.rsplit("/", 1)[0]
            fs.makedirs(root, exist_ok=True)
            probe = f"{root.rstrip('/')}/.write-check-{os.getpid()}"
            fs.pipe_file(probe, b"")
            fs.rm(made or probe, recursive=made is not None)
        except OSError as error:
            return error.strerror or str(error)
        return None

    def url(self, relative: str) -> str:
        """A path under the run with its protocol, as Ray workers open it."""
        return f"{self.prefix}{self.root}/{relative}"

    def part(self, stage: int, shard: int) -> str:
        return self.url(f"{self.stage_dirs[stage]}/{part_name(shard)}")

    def removed(self, stage: int, shard: int) -> str:
        return self.url(f"removed/{self.stage_dirs[stage]}/{part_name(shard)}")

    def report(self, stage: int, shard: int) -> str:
        return self.url(f"reports/{self.stage_dirs[stage]}/{part_name(shard)}")

    def work(self, stage: int) -> str:
        return self.url(f"work/{self.stage_dirs[stage]}")

    def path(self, relative: str) -> str:
        """A path under the run on its filesystem (without the protocol), for the driver's own reads and deletes."""
        return f"{self.root}/{relative}"

    def folders(self, stage_dir: str) -> list[str]:
        """Everything a stage wrote, relative to the root's filesystem path."""
        return [self.path(f"{where}{stage_dir}") for where in STAGE_PLACES]

    def stage_folders_on_disk(self) -> set[str]:
        """The stage folder names found under the run, wherever a stage writes (its parts, removed, work, reports)."""
        found = set()
        for parent in (self.path(where.rstrip("/")) if where else self.root for where in STAGE_PLACES):
            if self.fs.isdir(parent):
                found |= {name.rstrip("/").rsplit("/", 1)[-1] for name in self.fs.ls(parent, detail=False)}
        return {name for name in found if STAGE_DIR.match(name)}


def final_stage_dir(manifest: dict, origin: str) -> str:
    """The folder of the current recipe's last stage, from a manifest: never a stage an earlier recipe left."""
    stages = manifest.get("recipe", {}).get("stages")
    if not stages:
        raise ValueError(f"{origin}: its manifest.json names no recipe stages: is it the output folder of `curate run`?")
    return f"{len(stages):02d}_{stages[-1]['stage']}"


class Manifest:
    """What is done: per stage its chained config hash and finished shards with their stats. The driver is its only
    writer."""

    def __init__(self, folder: RunFolder):
        self.folder, self.fs = folder, folder.fs
        self.path = folder.path(MANIFEST)
        self.data = read_json(self.fs, self.path) if self.fs.exists(self.path) else {"stages": {}}
        self.forgotten: list[str] = []  # stage folders an earlier recipe left, deleted by `start`
        self.changed_files: dict[str, list[str]] = {}  # stage folder -> the files it loads that changed since it ran
        self.saved_at, self.save_seconds, self.unsaved = 0.0, 0.0, False

    @classmethod
    def start(cls, folder: RunFolder, stage_hashes: list[str], stage_loads: list[dict] | None = None, **about) -> "Manifest":
        """The run's manifest, created or resumed, with every stage whose config or loaded files changed forgotten;
        `about` (recipe, inputs, versions) is recorded as given."""
        folder.fs.makedirs(folder.root, exist_ok=True)
        remove_temporaries(folder.fs, folder.root, recursive=False)  # e.g. a manifest.json save the kill cut short
        manifest = cls(folder)
        manifest.forgotten = manifest.forget_other_stages()
        for stage_dir, stage_hash, loads in zip(folder.stage_dirs, stage_hashes, stage_loads or [{}] * len(stage_hashes)):
            manifest.prepare(stage_dir, stage_hash, loads)
        manifest.data.update(about)
        manifest.save()
        return manifest

    def forget_other_stages(self) -> list[str]:
        """Delete and forget the stages an earlier recipe ran into this folder that the current one does not have,
        so every reader (tokenize, stats, report, ablate) sees exactly the current recipe's stages."""
        stale = (set(self.data["stages"]) | self.folder.stage_folders_on_disk()) - set(self.folder.stage_dirs)
        for stage_dir in sorted(stale):
            self.delete(stage_dir)
            self.data["stages"].pop(stage_dir, None)
        return sorted(stale)

    def delete(self, stage_dir: str) -> None:
        for folder in self.folder.folders(stage_dir):
            if self.fs.exists(folder):
                self.fs.rm(folder, recursive=True)

    def prepare(self, stage_dir: str, stage_hash: str, loads: dict | None = None) -> None:
        """Forget a stage whose config or loaded files changed (its hash chains in every earlier stage) and delete what
        it wrote; a stage that had run is listed in `changed_files` when a file it loads is what changed."""
        entry = self.data["stages"].get(stage_dir)
        if entry is None or entry["config_hash"] != stage_hash:
            before = (entry or {}).get("loads") or {}
            changed = [path for path, digest in (loads or {}).items() if path in before and before[path] != digest]
            if entry and entry["shards"] and changed:
                self.changed_files[stage_dir] = changed
            self.delete(stage_dir)
            self.data["stages"][stage_dir] = {"config_hash": stage_hash, "shards": {}}
        if loads:
            self.data["stages"][stage_dir]["loads"] = loads
        for folder in self.folder.folders(stage_dir):
            remove_temporaries(self.fs, folder)

    def reset(self, stage_dir: str, stage_hash: str, loads: dict | None = None) -> None:
        """Forget every shard of a stage and delete what it wrote: it is redone."""
        self.delete(stage_dir)
        self.data["stages"][stage_dir] = {"config_hash": stage_hash, "shards": {}, **({"loads": loads} if loads else {})}

    def forget_shard(self, stage: int, shard: int) -> None:
        """Forget one shard of a stage and delete its part, removed documents and report rows: it is redone."""
        self.data["stages"][self.folder.stage_dirs[stage]]["shards"].pop(str(shard), None)
        for path in (self.folder.part(stage, shard), self.folder.removed(stage, shard), self.folder.report(stage, shard)):
            path = path.removeprefix(self.folder.prefix)
            if self.fs.exists(path):
                self.fs.rm(path)

    def recorded(self, stage_dir: str, shard: int) -> bool:
        return str(shard) in self.data["stages"][stage_dir]["shards"]

    def docs_out(self, stage_dir: str) -> int:
        return sum(shard["docs_out"] for shard in self.data["stages"][stage_dir]["shards"].values())

    def record(self, stage_dir: str, shard_stats: dict) -> None:
        self.data["stages"][stage_dir]["shards"][str(shard_stats["shard"])] = shard_stats

    def save(self) -> None:
        started = time.perf_counter()
        write_json_atomic(self.fs, self.path, self.data, compact=True)
        self.saved_at = time.perf_counter()
        self.save_seconds, self.unsaved = self.saved_at - started, False

    def save_soon(self) -> None:
        """Save after a finished task unless the last save was too recent: at most SAVE_SHARE of the time goes to it.
        A save writes the whole manifest (a file store cannot append), so one per task grew with the square of the
        shards: at 10,000 shards one took 0.9 s and wrote 33 MB. Small runs still save after every task; a big one
        every few seconds, and what a kill leaves unsaved is redone on resume, into the same atomic parts."""
        if time.perf_counter() - self.saved_at >= self.save_seconds / SAVE_SHARE:
            self.save()
        else:
            self.unsaved = True

    def save_if_unsaved(self) -> None:
        if self.unsaved:
            self.save()
