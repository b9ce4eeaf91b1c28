//! (being written: health checks, metrics, admin HTTP, reload signals, tracer)
