"""attnkit.inspect"""
