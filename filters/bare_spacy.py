"""spaCy without what other installed packages plug into it, for stages that use its tokenizer or a named model.

thinc imports torch when it is installed (it is, for training): ~200-300 MiB and a second or more in every curation
worker. And every `Language()` first loads each package's `spacy_factories` entry point: Presidio's imports
transformers (and with it torch), which made `spacy.blank("en")` take 2.1 s instead of 0.2 s and `import
presidio_analyzer` several seconds in each worker. Inside `bare_spacy()` neither torch nor transformers can be
imported and no entry-point factory loads; both stay importable afterwards for code that wants them. spaCy's first
import also skips its command line (typer, requests, httpx, jinja2, weasel: ~0.3 s and ~18 MiB per worker, there only
for `spacy.info`), which stays importable too.
"""

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

HIDDEN = ("torch", "transformers")


@contextmanager
def bare_spacy() -> Iterator[None]:
    hidden = [name for name in HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # makes `import name` raise ImportError
    try:
        import catalogue

        _import_spacy_without_its_cli()
        from spacy import util

        plugins = util.registry._entry_point_factories
        util.registry._entry_point_factories = catalogue.create("spacy", "factories", entry_points=False)
        try:
            yield
        finally:
            util.registry._entry_point_factories = plugins
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:  # still the block's marker, not a module imported meanwhile
                del sys.modules[name]


CLI_MODULES = ("spacy.cli", "spacy.cli.info")  # what `spacy/__init__.py` imports of its command line


def _import_spacy_without_its_cli() -> None:
    if "spacy" in sys.modules:
        return
    placeholders = {name: types.ModuleType(name) for name in CLI_MODULES}
    placeholders["spacy.cli.info"].info = _spacy_info
    sys.modules.update(placeholders)
    try:
        import spacy  # noqa: F401
    finally:
        for name, module in placeholders.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def _spacy_info(*args, **kwargs):
    """`spacy.info`, its command line imported when first called."""
    from spacy.cli.info import info

    return info(*args, **kwargs)
