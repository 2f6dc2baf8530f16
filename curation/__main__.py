import sys

from curation.cli import main

sys.exit(main())
