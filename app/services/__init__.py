"""Services compose store calls and the upstream client; handlers stay thin."""
