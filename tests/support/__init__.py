"""What several test files share: clients of a test master, clocks, ports, graphs, data
sources, checkers. Test modules import from here, never from one another."""
