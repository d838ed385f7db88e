from repens.cli import main

raise SystemExit(main())
