"""Management: answering requests about the mesh and acting on it, and the client that asks."""
