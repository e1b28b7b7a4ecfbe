"""The Meshgate web console (Django). For now a bare project; the topology,
queue and redistribution views arrive with the mesh."""
