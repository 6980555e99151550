"""What the gateway is told: its settings (environment, `.env`), the names they may have, the models
file and its catalog, and what a database URL says about the process."""
