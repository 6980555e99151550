"""The gateway process put together: the app factory and its lifespan, the routes, the runtime
that composes every service, start-up checks and `serve`."""
