# ruff: noqa: E501  (one statement a line: this module is data)
"""The simulated text model's background knowledge: short textbook statements (data, no code).

The text reader of :mod:`runner.simulated._text` (version ``prompt-sim-text-3``) consults these
statements before it falls back to word overlap, the way a model answers from what it learnt in
training rather than from the prompt. They were written for this project as general medical
knowledge, in our own words; they are not read from any item file, truth table or answer key
(this module imports nothing and opens nothing). Each model id *knows* a statement or not by a
hash of the two (``docs/simulated.md`` §2.2), so two models know different parts of it.

They cover topics of the questions in ``runner/templates/medmcqa_prompt_sensitivity``; a
question on a topic no statement covers is read by word overlap alone, as before.
"""

from __future__ import annotations

__all__ = ["KNOWLEDGE"]

KNOWLEDGE: tuple[str, ...] = (
    "N-acetylcysteine is the specific antidote for paracetamol overdose.",
    "ACE inhibitors cause a persistent dry cough through bradykinin accumulation, unlike other antihypertensive drugs.",
    "Warfarin inhibits vitamin K epoxide reductase, which gives its anticoagulant effect.",
    "Rifampicin is a potent inducer of hepatic cytochrome P450 enzymes.",
    "Ototoxicity and nephrotoxicity are characteristic adverse effects of aminoglycoside antibiotics such as gentamicin.",
    "Parietal cells of the gastric glands secrete intrinsic factor and acid.",
    "The sinoatrial node initiates each cardiac impulse of the healthy heart.",
    "The proximal convoluted tubule reabsorbs most of the filtered sodium in the nephron.",
    "Antidiuretic hormone (vasopressin) is released from the posterior pituitary when plasma osmolality rises.",
    "A fall in the partial pressure of carbon dioxide shifts the oxygen-haemoglobin dissociation curve to the left.",
    "Caseous necrosis is most characteristic of tuberculosis.",
    "Reed-Sternberg cells are characteristic of Hodgkin lymphoma in a lymph node biopsy.",
    "Alpha-fetoprotein is the serum tumour marker of hepatocellular carcinoma.",
    "Allergic contact dermatitis to nickel is a type IV delayed hypersensitivity reaction, mediated by T cells.",
    "An example of metaplasia is squamous epithelium replacing ciliated columnar epithelium in the bronchi of a smoker.",
    "Streptococcus pneumoniae is the most common cause of community-acquired lobar pneumonia.",
    "The Ziehl-Neelsen stain demonstrates acid-fast bacilli such as Mycobacterium tuberculosis.",
    "Epstein-Barr virus causes heterophile antibody-positive infectious mononucleosis.",
    "Clostridioides difficile causes pseudomembranous colitis after antibiotic treatment.",
    "Diphtheria toxin inactivates elongation factor 2 by ADP-ribosylation, which damages host cells.",
    "The axillary nerve is at risk in a fracture of the surgical neck of the humerus.",
    "The abducens nerve supplies the lateral rectus muscle of the eye.",
    "The thoracic duct drains into the junction of the left subclavian and left internal jugular veins.",
    "The mandibular nerve passes through the foramen ovale of the sphenoid bone.",
    "Supraspinatus initiates abduction of the arm at the shoulder.",
    "Phenylketonuria is caused by deficiency of phenylalanine hydroxylase.",
    "Niacin is the vitamin precursor of the coenzymes NAD and NADP.",
    "HMG-CoA reductase catalyses the rate-limiting step of cholesterol synthesis.",
    "Carbamoyl phosphate of the urea cycle is formed in the mitochondrial matrix.",
    "In scurvy, defective hydroxylation of proline and lysine weakens collagen.",
    "A fasting plasma glucose of 7.0 mmol/L (126 mg/dL) or more meets the diagnostic threshold for diabetes mellitus.",
    "Tall, peaked T waves are the earliest electrocardiographic sign of hyperkalaemia.",
    "Intramuscular adrenaline (epinephrine) is the first-line drug treatment for anaphylaxis.",
    "Anti-double-stranded DNA antibody is the most specific autoantibody for systemic lupus erythematosus.",
    "Graves disease is the most common cause of hyperthyroidism where iodine is sufficient.",
    "A typically developing child begins to walk independently at about 12 months of age.",
    "Respiratory syncytial virus is the most common cause of bronchiolitis in infants.",
    "Hypertrophic pyloric stenosis gives an infant projectile non-bilious vomiting and an olive-shaped epigastric mass.",
    "Koplik spots on the buccal mucosa are the prodromal sign of measles.",
    "Tetralogy of Fallot is the most common cyanotic congenital heart disease in children.",
)
"""The statements, in a fixed order (their index is not used: a statement is known by its text)."""
