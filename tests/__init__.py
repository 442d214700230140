"""The test suite: tests/core and tests/app mirror the packages they test, tests/journeys walk across them."""
