"""operators.api"""
