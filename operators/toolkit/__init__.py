"""operators.toolkit"""
