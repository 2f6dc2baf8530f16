"""spaCy without what other installed packages plug into it, for stages that use its tokenizer or a named model.

thinc imports torch when it is installed (it is, for training): ~200-300 MiB and a second or more in every curation
worker. And every `Language()` first loads each package's `spacy_factories` entry point: Presidio's imports
transformers (and with it torch), which made `spacy.blank("en")` take 2.1 s instead of 0.2 s and `import
presidio_analyzer` several seconds in each worker. Inside `bare_spacy()` neither torch nor transformers can be
imported and no entry-point factory loads; both stay importable afterwards for code that wants them.
"""

import sys
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
