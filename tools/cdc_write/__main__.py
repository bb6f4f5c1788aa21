from tools.cdc_write.cli import main

raise SystemExit(main())
