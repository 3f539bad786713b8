"""Adaptive testing (AdaTest, Ribeiro & Lundberg, ACL 2022): test trees in AdaTest's CSV
layout (``tree``), their tests as lingtest cases (``cases``), failure scores per model
(``scoring``) and the prompt builder of the testing loop (``prompts``)."""
