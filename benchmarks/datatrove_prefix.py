"""The anchor for benchmarks/curate_vs_datatrove.py: datatrove's FineWeb pipeline cut after language ID.

Runs under a Python that has datatrove (see benchmarks/README.md), not the project's own:
    python datatrove_prefix.py 'WARC_GLOB' WORKDIR --workers W --lid-model lid.176.ftz
Prints one JSON line: wall seconds and docs in/out, as datatrove's own stats count them.
"""

import argparse
import glob
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("warc_glob")
    parser.add_argument("workdir")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lid-model", required=True)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter
    from datatrove.utils.lid import FT176LID

    class LocalFT176LID(FT176LID):
        """lid.176 from a local file: datatrove's own would download it."""

        MODEL_SUBFOLDER = "ft176_local"

        def __init__(self, languages=None, k=-1, model_path=None):
            super().__init__(languages, k)
            self.MODEL_URL = model_path

    files = sorted(glob.glob(args.warc_glob))
    folder = os.path.dirname(os.path.abspath(files[0]))
    paths_file = os.path.join(args.workdir, "paths.txt")
    os.makedirs(args.workdir, exist_ok=True)
    with open(paths_file, "w") as handle:
        handle.write("\n".join(os.path.basename(f) for f in files) + "\n")
    language = LanguageFilter(languages=["en"], language_threshold=0.65)
    language.model = LocalFT176LID(["en"], model_path=os.path.abspath(args.lid_model))
    executor = LocalPipelineExecutor(
        pipeline=[
            WarcReader(folder, paths_file=paths_file, compression="infer"),
            Trafilatura(favour_precision=True, timeout=args.timeout),
            language,
            JsonlWriter(os.path.join(args.workdir, "output")),
        ],
        tasks=len(files),
        workers=args.workers,
        logging_dir=os.path.join(args.workdir, "logs"),
    )
    started = time.perf_counter()
    executor.run()
    wall = time.perf_counter() - started
    with open(os.path.join(args.workdir, "logs", "stats.json")) as handle:
        blocks = json.load(handle)

    def total(value):
        return value.get("total", 0) if isinstance(value, dict) else value or 0

    reader = next(b for b in blocks if "Warc" in b["name"])
    writer = next(b for b in blocks if "Jsonl" in b["name"] or "Writer" in b["name"])
    print(json.dumps({"wall": wall, "docs_in": total(reader["stats"].get("documents")), "docs_out": total(writer["stats"].get("total"))}))


if __name__ == "__main__":
    main()
