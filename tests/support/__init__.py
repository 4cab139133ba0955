"""Helpers every test package may use: polling (:mod:`tests.support.eventually`) and running a test
program as a module of the ``tests`` package (:mod:`tests.support.programs`)."""
