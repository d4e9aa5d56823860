"""What every experiment shares: the registry (:mod:`.registry`), the runner behind ``attnkit
experiment`` (:mod:`.runner`, :mod:`.command`), the run context and training loop (:mod:`.context`,
:mod:`.fit`, :mod:`.ddp`), crash-safe files (:mod:`.atomic`), length-bucketed batches
(:mod:`.batching`), committed results (:mod:`.committed`) and the thread setting of small models
(:mod:`.threads`)."""
