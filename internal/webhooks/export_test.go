package webhooks

import "time"

// Backoff exposes the worker's backoff to the tests.
func Backoff(w *Worker, n int) time.Duration { return w.backoff(n) }
