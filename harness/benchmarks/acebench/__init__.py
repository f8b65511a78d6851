"""ACEBench (chenchen0103/ACEBench): its agent category imported as environments and scenarios."""
