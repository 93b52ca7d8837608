"""operators.cache"""
