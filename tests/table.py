"""The target table as codegen/targets.py writes it, taken when the tests are collected: tests/conftest.py's fixture
replaces the sm_90 entry for each test (tags, paces and the tensor-core rows at any width), so a test that checks the
table's own value reads it here, not from targets.TARGETS inside the test."""
from kiec.codegen import targets

SM90 = targets.TARGETS["sm_90"]
