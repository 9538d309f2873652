"""The project's tests (a package, so ``tests.conftest`` wins over any ``tests`` a dependency installs)."""
