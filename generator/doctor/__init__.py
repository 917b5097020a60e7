"""doctor: is this host ready for this stack, and does KV move at the speed it should?"""
