"""Worker: agent, generator pool, trainer loop."""
