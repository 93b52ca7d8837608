"""operators.cel"""
