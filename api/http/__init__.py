"""The HTTP face: app factory, routes, schemas, middleware, auth, and the one place a
domain error becomes a status and the error shape."""
