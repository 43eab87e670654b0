// Package ops serves a node's operations endpoints over HTTP:
//
//	/metrics  Prometheus exposition of a Gatherer (promhttp)
//	/healthz  liveness: 200 "ok", or 503 and the error text when Checks.Healthy fails
//	/readyz   readiness: the same with Checks.Ready (for example: joined, leader known)
//
// Health and readiness checks are functions the node supplies; a nil check always passes.
// Checks run on every request, concurrently with each other and with the node, so they must be
// cheap and safe for concurrent use. Serve runs the listener until its context ends and then
// shuts down gracefully.
package ops
