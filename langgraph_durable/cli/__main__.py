"""Allow ``python -m langgraph_durable.cli``."""

from langgraph_durable.cli import main

raise SystemExit(main())
