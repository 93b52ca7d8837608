"""operators.allocator"""
