from curation.cli import exit_script, main

exit_script(main())
