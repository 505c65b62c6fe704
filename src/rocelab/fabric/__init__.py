"""fabric"""
