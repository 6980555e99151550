"""What every domain's shell shares: shielded cleanup and periodic rounds."""
