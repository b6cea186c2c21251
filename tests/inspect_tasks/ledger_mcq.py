"""A small text multiple-choice Inspect task for the extension's tests and benchmark.

Twelve questions written for this project (general clinical knowledge, four options each),
answered with Inspect's ``multiple_choice()`` solver and scored with ``choice()``. Run it with
``inspect eval tests/inspect_tasks/ledger_mcq.py --model ...``; ``-T repeat=N`` repeats the
questions N times (distinct ids) for a longer run.
"""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import choice
from inspect_ai.solver import multiple_choice

QUESTIONS: list[tuple[str, list[str], str]] = [
    (
        "Which vitamin deficiency causes scurvy?",
        ["Vitamin A", "Vitamin B12", "Vitamin C", "Vitamin D"],
        "C",
    ),
    ("Which organ produces insulin?", ["Liver", "Pancreas", "Kidney", "Spleen"], "B"),
    (
        "What is the normal adult resting heart rate range (beats per minute)?",
        ["30-50", "60-100", "110-150", "160-200"],
        "B",
    ),
    (
        "Which blood cells carry oxygen?",
        ["Erythrocytes", "Neutrophils", "Platelets", "Lymphocytes"],
        "A",
    ),
    (
        "Which electrolyte disturbance peaks the T waves on an ECG?",
        ["Hyponatraemia", "Hypokalaemia", "Hyperkalaemia", "Hypocalcaemia"],
        "C",
    ),
    ("Which bone is the longest in the human body?", ["Humerus", "Tibia", "Femur", "Fibula"], "C"),
    (
        "Which imaging test uses no ionising radiation?",
        ["CT", "Plain radiograph", "Mammography", "MRI"],
        "D",
    ),
    (
        "Which hormone do the adrenal medullae secrete?",
        ["Adrenaline", "Cortisol", "Aldosterone", "Thyroxine"],
        "A",
    ),
    (
        "Where is the mitral valve?",
        [
            "Right atrium to right ventricle",
            "Left atrium to left ventricle",
            "Left ventricle to aorta",
            "Right ventricle to pulmonary artery",
        ],
        "B",
    ),
    (
        "Which nerve does carpal tunnel syndrome compress?",
        ["Ulnar", "Radial", "Median", "Axillary"],
        "C",
    ),
    (
        "Which test best screens for diabetes control over three months?",
        ["Fasting glucose", "HbA1c", "Urine ketones", "C-peptide"],
        "B",
    ),
    (
        "Which organism causes tuberculosis?",
        [
            "Mycobacterium tuberculosis",
            "Staphylococcus aureus",
            "Streptococcus pneumoniae",
            "Escherichia coli",
        ],
        "A",
    ),
]


@task
def ledger_mcq(repeat: int = 1) -> Task:
    """The questions, ``repeat`` times over, as multiple-choice samples scored by ``choice()``."""
    samples = [
        Sample(id=f"q{i + 1:02d}-{r + 1}", input=question, choices=options, target=answer)
        for r in range(int(repeat))
        for i, (question, options, answer) in enumerate(QUESTIONS)
    ]
    return Task(
        dataset=MemoryDataset(samples, name="ledger-mcq"),
        solver=multiple_choice(),
        scorer=choice(),
        version=1,
    )
