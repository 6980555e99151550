"""What an operator sees of the gateway: structured logs (with secrets redacted), Prometheus
metrics."""
