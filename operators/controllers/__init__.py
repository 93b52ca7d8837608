"""operators.controllers"""
