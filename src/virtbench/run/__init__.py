"""Running a suite, booting and checking instances: the session, the runner and its lockstep rounds,
the plan with its estimates, progress and outcomes."""
