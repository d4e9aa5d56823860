"""attnkit.distributed"""
