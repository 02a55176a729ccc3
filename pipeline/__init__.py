"""specfleet driver side: spec, planning, execution on Ray, tracking, reports, autotune, CLI.

`pipeline.core` is the part workers share: job contracts, the acceptance and depth-choice
maths, schedules and checkpoint files, importing neither torch nor the driver's libraries.
"""
