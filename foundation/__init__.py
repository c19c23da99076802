"""The shared floor under the apps: errors, logs, the principal, wire types, telemetry, the host
config model, tool schemas, REST templates and the request → application object accessor.
Imports no app and not `brainsite`; every app may import it."""
