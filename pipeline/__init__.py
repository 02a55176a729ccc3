"""specfleet driver side: spec, planning, execution on Ray, tracking, depth choice, CLI."""
