"""The console's access to the mesh: what the nodes wrote to Redis (snapshots,
events, rollups) and the management requests it sends them. No Django models:
the console keeps no state of the mesh of its own."""
