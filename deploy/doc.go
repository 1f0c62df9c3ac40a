// Package deploy holds no code: it is the deploy kit (systemd unit,
// Kubernetes manifests, Prometheus alert rules) and the tests that check it
// against the real daemon.
package deploy
