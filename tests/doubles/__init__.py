"""Test doubles: real servers and scripted models that tests and benchmarks talk to over real interfaces."""
