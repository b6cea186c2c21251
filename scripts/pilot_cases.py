"""The ``green-shielding-pilot`` template's exam questions, written for this project.

Seed 001's pilot study (§3) perturbs diagnosis-focused MedQA / MedXpertQA questions. No text of
either dataset is used here: the 30 diagnostic vignettes, the 5 questions that ask something
other than a diagnosis, the 3 that ask a diagnosis only indirectly and the 4 records past the
declared range were all composed for this project, from textbook presentations, in MedXpertQA's
*Text* release format (one JSON object a line: ``id``, ``question`` ending in ``\\nAnswer
Choices: (A) ... (J) ...``, ``options`` ``{"A": ..., "J": ...}``, ``label``, ``medical_task``,
``body_system``, ``question_type``), so that ``ledger new`` imports them exactly as a user
imports MedXpertQA (``ledger items import --format medxpertqa``).

A vignette is a *patient* sentence (age, sex, setting), *symptom* sentences (the history) and
*test* sentences (vital signs, examination, laboratory and imaging results), then the ask. Its
ten options are the answer, its *confuser* (the diagnosis a reader misled by the shared
features would give) and eight other diagnoses of the pool, drawn and ordered by SHA-256 of the
record id: deterministic, no randomness. Run from the repository root to (re)write the file::

    python scripts/pilot_cases.py
"""
# ruff: noqa: E501

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

OUT = (
    Path(__file__).resolve().parent.parent
    / "runner"
    / "templates"
    / "green_shielding_pilot"
    / "data"
    / "questions-medxpertqa.jsonl"
)
LABELS = "ABCDEFGHIJ"
ASK = "What is the most likely diagnosis?"

# (answer, confuser, body system, patient, symptoms, tests)
CASES: list[tuple[str, str, str, str, str, str]] = [
    (
        "Community-acquired pneumonia",
        "Acute bronchitis",
        "Respiratory",
        "A 67-year-old man is brought to the emergency department by his daughter.",
        "He has had a productive cough with rusty sputum, shaking chills and right-sided pleuritic chest pain for two days.",
        "His temperature is 39.2 C and respiratory rate 28/min. There are bronchial breath sounds over the right lower zone. A chest x-ray shows lobar consolidation of the right lower lobe.",
    ),
    (
        "Pulmonary embolism",
        "Pneumothorax",
        "Respiratory",
        "A 34-year-old woman comes to the emergency department ten days after a long-haul flight.",
        "She reports sudden breathlessness and sharp chest pain on inspiration, and her left calf has been swollen and sore.",
        "Her pulse is 118/min and oxygen saturation 89% on room air. The D-dimer is raised and a CT pulmonary angiogram shows a filling defect in the right main pulmonary artery.",
    ),
    (
        "Acute appendicitis",
        "Mesenteric adenitis",
        "Digestive",
        "A 19-year-old man presents to the surgical admissions unit.",
        "His abdominal pain began around the umbilicus yesterday and has moved to the right lower quadrant; he has lost his appetite and vomited twice.",
        "His temperature is 37.9 C. There is rebound tenderness at McBurney point and the white cell count is 15,800/mm3 with a neutrophilia.",
    ),
    (
        "Acute cholecystitis",
        "Biliary colic",
        "Digestive",
        "A 45-year-old woman is seen in the emergency department.",
        "She describes constant right upper quadrant pain radiating to the right shoulder for 20 hours, which began after a fatty meal, with nausea.",
        "Her temperature is 38.4 C and Murphy sign is positive. Ultrasound shows gallstones, a thickened gallbladder wall and pericholecystic fluid.",
    ),
    (
        "Acute pancreatitis",
        "Perforated peptic ulcer",
        "Digestive",
        "A 52-year-old man presents to the emergency department after a weekend of heavy drinking.",
        "He has severe epigastric pain boring through to the back, eased by leaning forward, with repeated vomiting.",
        "His pulse is 110/min. Serum lipase is 2,400 U/L (more than three times the upper limit) and CT shows an oedematous pancreas with peripancreatic fat stranding.",
    ),
    (
        "Diabetic ketoacidosis",
        "Hyperosmolar hyperglycaemic state",
        "Endocrine",
        "A 16-year-old girl is brought to the emergency department by her parents.",
        "For a week she has been very thirsty and passing large volumes of urine; today she has abdominal pain, vomiting and is drowsy.",
        "She has deep sighing respirations at 30/min. Blood glucose is 31 mmol/L, arterial pH 7.08, bicarbonate 6 mmol/L and urine ketones are 3+.",
    ),
    (
        "Graves disease",
        "Toxic multinodular goitre",
        "Endocrine",
        "A 29-year-old woman visits her general practitioner.",
        "She has lost 6 kg despite a good appetite, feels hot and shaky, has palpitations and has noticed her eyes look prominent.",
        "Her pulse is 112/min and regular. There is a diffuse smooth goitre with a bruit and proptosis. TSH is undetectable, free T4 is raised and TSH-receptor antibodies are positive.",
    ),
    (
        "Primary hypothyroidism",
        "Depression",
        "Endocrine",
        "A 58-year-old woman attends a routine clinic appointment.",
        "She has felt tired and low for months, feels cold when others are warm, has gained weight and is constipated.",
        "Her pulse is 54/min and her ankle reflexes relax slowly. The skin is dry. TSH is 38 mU/L and free T4 is low.",
    ),
    (
        "Addison disease",
        "Anorexia nervosa",
        "Endocrine",
        "A 36-year-old woman is referred to the medical clinic.",
        "She reports months of fatigue, weight loss, salt craving and dizziness on standing.",
        "Her blood pressure is 92/60 mmHg lying and 78/50 mmHg standing, with pigmented palmar creases and buccal mucosa. Sodium is 126 mmol/L, potassium 5.9 mmol/L and an ACTH stimulation test shows a flat cortisol response.",
    ),
    (
        "Acute myocardial infarction",
        "Aortic dissection",
        "Cardiovascular",
        "A 61-year-old man with type 2 diabetes calls an ambulance.",
        "He has had crushing central chest pain radiating to the left arm and jaw for 40 minutes, with sweating and nausea.",
        "His blood pressure is 148/90 mmHg in both arms. The ECG shows ST elevation in leads II, III and aVF and the high-sensitivity troponin is markedly raised.",
    ),
    (
        "Aortic dissection",
        "Acute myocardial infarction",
        "Cardiovascular",
        "A 70-year-old man with long-standing poorly controlled hypertension is brought in by ambulance.",
        "He describes sudden tearing chest pain that radiates through to the back between the shoulder blades.",
        "Blood pressure is 182/100 mmHg in the right arm and 138/80 mmHg in the left arm. The ECG is without ST elevation and CT angiography shows an intimal flap in the ascending aorta.",
    ),
    (
        "Infective endocarditis",
        "Rheumatic fever",
        "Cardiovascular",
        "A 31-year-old man who injects drugs is admitted from the emergency department.",
        "He has had fevers, night sweats and malaise for three weeks.",
        "His temperature is 38.8 C. There is a new pansystolic murmur at the left sternal edge, splinter haemorrhages and painless macules on the palms. Three blood cultures grow Staphylococcus aureus and echocardiography shows a tricuspid valve vegetation.",
    ),
    (
        "Atrial fibrillation",
        "Sinus tachycardia",
        "Cardiovascular",
        "A 74-year-old woman presents to her general practitioner.",
        "She has had intermittent palpitations and breathlessness on exertion for a week.",
        "Her pulse is irregularly irregular at 132/min. The ECG shows absent P waves with irregular narrow QRS complexes.",
    ),
    (
        "Congestive heart failure",
        "Chronic obstructive pulmonary disease",
        "Cardiovascular",
        "A 72-year-old man with a previous myocardial infarction is seen in clinic.",
        "He has worsening breathlessness on exertion, must sleep on three pillows and wakes at night gasping; his ankles have swollen.",
        "His jugular venous pressure is raised with bibasal crackles and pitting oedema to the knees. NT-proBNP is 4,200 pg/mL and echocardiography shows an ejection fraction of 30%.",
    ),
    (
        "Bacterial meningitis",
        "Viral encephalitis",
        "Nervous",
        "A 20-year-old university student is brought to the emergency department by her roommate.",
        "She has a severe headache, vomiting and cannot bear bright light; she became confused this evening.",
        "Her temperature is 39.6 C with neck stiffness and a non-blanching petechial rash. The cerebrospinal fluid is turbid with 2,100 neutrophils/mm3, low glucose and high protein; Gram stain shows Gram-negative diplococci.",
    ),
    (
        "Subarachnoid haemorrhage",
        "Migraine",
        "Nervous",
        "A 48-year-old woman is brought to the emergency department.",
        "While lifting a box she had a sudden explosive headache, the worst of her life, followed by vomiting.",
        "She has neck stiffness and a Glasgow coma score of 14. A non-contrast CT of the head shows blood in the basal cisterns.",
    ),
    (
        "Ischaemic stroke",
        "Todd paresis",
        "Nervous",
        "A 76-year-old man with atrial fibrillation is brought in by ambulance.",
        "His wife noticed 50 minutes ago that his face drooped and he could not lift his right arm or find his words.",
        "He has right facial weakness, right arm and leg power 2/5 and expressive dysphasia. Capillary glucose is 6.1 mmol/L. CT of the head shows no haemorrhage and CT angiography shows occlusion of the left middle cerebral artery.",
    ),
    (
        "Guillain-Barre syndrome",
        "Myasthenia gravis",
        "Nervous",
        "A 38-year-old man is admitted to the neurology ward.",
        "Three weeks after a diarrhoeal illness he developed tingling in his feet and weakness climbing stairs, now spreading to his arms.",
        "There is symmetrical flaccid weakness of all four limbs with absent reflexes. Nerve conduction studies show demyelination and the cerebrospinal fluid has protein of 2.1 g/L with a normal cell count.",
    ),
    (
        "Multiple sclerosis",
        "Neuromyelitis optica",
        "Nervous",
        "A 27-year-old woman is referred to the neurology clinic.",
        "Last year she had blurred vision and pain on moving the right eye, and now has numbness in both legs and an electric sensation down the spine on neck flexion.",
        "There is a right relative afferent pupillary defect and brisk lower limb reflexes. MRI of the brain shows periventricular white matter lesions and the cerebrospinal fluid has oligoclonal bands.",
    ),
    (
        "Iron deficiency anaemia",
        "Anaemia of chronic disease",
        "Hematologic",
        "A 42-year-old woman sees her general practitioner.",
        "She is tired all the time, breathless on stairs and has heavy periods; she has been craving ice.",
        "She has pale conjunctivae and spoon-shaped nails. Haemoglobin is 8.4 g/dL, mean cell volume 68 fL and ferritin 4 ug/L.",
    ),
    (
        "Vitamin B12 deficiency anaemia",
        "Folate deficiency anaemia",
        "Hematologic",
        "A 66-year-old woman with vitiligo attends clinic.",
        "She reports fatigue, a sore tongue and pins and needles in both feet.",
        "Vibration sense is lost at the ankles. Haemoglobin is 8.9 g/dL with a mean cell volume of 118 fL, hypersegmented neutrophils, low serum B12 and positive intrinsic factor antibodies.",
    ),
    (
        "Acute lymphoblastic leukaemia",
        "Aplastic anaemia",
        "Hematologic",
        "A 5-year-old boy is brought to the paediatric clinic.",
        "His parents say he has been pale and tired for a month, bruises easily and complains of bone pain at night.",
        "There is cervical lymphadenopathy and splenomegaly. The blood count shows haemoglobin 7 g/dL, platelets 22,000/mm3 and blasts on the film; bone marrow is 85% lymphoblasts.",
    ),
    (
        "Acute pyelonephritis",
        "Acute cystitis",
        "Renal",
        "A 25-year-old woman presents to the emergency department.",
        "She has had burning on passing urine for three days and now has left flank pain, rigors and vomiting.",
        "Her temperature is 39.4 C with left costovertebral angle tenderness. Urinalysis shows nitrites, leucocytes and white cell casts.",
    ),
    (
        "Nephrotic syndrome",
        "Acute glomerulonephritis",
        "Renal",
        "A 6-year-old boy is brought in by his mother.",
        "His eyelids have been puffy every morning for a week and now his legs and scrotum are swollen; his urine is frothy.",
        "Blood pressure is 98/60 mmHg. There is pitting oedema and ascites. Urine protein is 4+ with no red cells, serum albumin is 14 g/L and cholesterol is raised.",
    ),
    (
        "Renal colic due to ureteric stone",
        "Acute pyelonephritis",
        "Renal",
        "A 40-year-old man comes to the emergency department.",
        "He has waves of severe right loin pain radiating to the groin; he cannot lie still.",
        "He is afebrile. Urine dipstick shows blood and a non-contrast CT of the abdomen shows a 5 mm calculus at the right vesicoureteric junction with mild hydronephrosis.",
    ),
    (
        "Rheumatoid arthritis",
        "Osteoarthritis",
        "Skeletal",
        "A 47-year-old woman is referred to the rheumatology clinic.",
        "For three months she has had painful swollen hands with morning stiffness lasting two hours.",
        "Both wrists and the metacarpophalangeal joints are swollen and tender. Rheumatoid factor and anti-CCP antibodies are positive and hand x-rays show periarticular erosions.",
    ),
    (
        "Gout",
        "Septic arthritis",
        "Skeletal",
        "A 55-year-old man who takes a thiazide diuretic presents to his general practitioner.",
        "He woke overnight with excruciating pain in his right big toe; even the bedsheet touching it hurts.",
        "The first metatarsophalangeal joint is red, hot and swollen. Joint aspirate shows needle-shaped negatively birefringent crystals and serum urate is 0.56 mmol/L.",
    ),
    (
        "Systemic lupus erythematosus",
        "Dermatomyositis",
        "Skeletal",
        "A 24-year-old woman is referred to the medical clinic.",
        "She has had painful joints in the hands, mouth ulcers, hair loss and a facial rash after time in the sun.",
        "There is a malar rash sparing the nasolabial folds. Antinuclear and anti-double-stranded DNA antibodies are positive, complement C3 is low and urine shows protein 2+.",
    ),
    (
        "Ectopic pregnancy",
        "Ruptured ovarian cyst",
        "Reproductive",
        "A 28-year-old woman presents to the emergency department.",
        "Her last period was seven weeks ago; she has sudden left lower abdominal pain, light vaginal bleeding and pain at the tip of her shoulder.",
        "Her pulse is 120/min and blood pressure 90/55 mmHg. Serum beta-hCG is 2,300 IU/L and transvaginal ultrasound shows an empty uterus with free fluid in the pouch of Douglas.",
    ),
    (
        "Polycystic ovary syndrome",
        "Congenital adrenal hyperplasia",
        "Reproductive",
        "A 23-year-old woman attends the gynaecology clinic.",
        "She has had irregular periods every two to three months since menarche, worsening acne and excess hair on her chin.",
        "Her body mass index is 31. Serum testosterone is mildly raised, LH is elevated relative to FSH and pelvic ultrasound shows more than 20 follicles in each ovary.",
    ),
]

# Questions about something other than the diagnosis: the screening step sets these aside.
NON_DIAGNOSTIC: list[tuple[str, str, str, list[str]]] = [
    (
        "Cardiovascular",
        "A 59-year-old man with stable angina is started on a medication that irreversibly inhibits platelet cyclo-oxygenase. What is the mechanism of action of the drug he was most likely given?",
        "Irreversible acetylation of cyclo-oxygenase",
        [
            "Inhibition of the P2Y12 receptor",
            "Inhibition of thrombin",
            "Inhibition of factor Xa",
            "Blockade of glycoprotein IIb/IIIa",
            "Inhibition of vitamin K epoxide reductase",
            "Activation of antithrombin",
            "Inhibition of phosphodiesterase 3",
            "Stimulation of plasminogen",
            "Blockade of beta-1 receptors",
        ],
    ),
    (
        "Endocrine",
        "A 45-year-old woman has newly diagnosed type 2 diabetes with an HbA1c of 62 mmol/mol and normal renal function. What is the most appropriate first-line drug treatment?",
        "Metformin",
        [
            "Insulin glargine",
            "Gliclazide",
            "Pioglitazone",
            "Sitagliptin",
            "Acarbose",
            "Dapagliflozin",
            "Exenatide",
            "Repaglinide",
            "Orlistat",
        ],
    ),
    (
        "Respiratory",
        "A 30-year-old man is treated for a spontaneous pneumothorax of 3 cm at the hilum with breathlessness. What is the most appropriate next step in management?",
        "Needle aspiration",
        [
            "Observation alone",
            "Surgical pleurodesis",
            "Intubation",
            "Bronchoscopy",
            "High-flow oxygen only",
            "Thoracotomy",
            "Chest physiotherapy",
            "Oral antibiotics",
            "Repeat x-ray in six weeks",
        ],
    ),
    (
        "Renal",
        "A 70-year-old woman with chronic kidney disease stage 4 asks about her prognosis. Which measurement best predicts progression to kidney failure?",
        "Urine albumin-to-creatinine ratio",
        [
            "Serum sodium",
            "Serum calcium",
            "Haemoglobin",
            "Body mass index",
            "Serum phosphate",
            "Blood urea nitrogen alone",
            "Urine specific gravity",
            "Serum bicarbonate",
            "Uric acid",
        ],
    ),
    (
        "Nervous",
        "A 33-year-old woman with epilepsy controlled on sodium valproate plans a pregnancy. What is the most appropriate advice?",
        "Review and switch to a safer antiepileptic drug before conception",
        [
            "Stop all antiepileptic drugs now",
            "Continue valproate unchanged",
            "Double the valproate dose",
            "Add carbamazepine",
            "Avoid folic acid",
            "Delay pregnancy for ten years",
            "Start lithium",
            "Take vitamin A supplements",
            "Stop driving permanently",
        ],
    ),
]

# Ask a diagnosis only indirectly ("most likely cause"): the screener is less sure of them.
INDIRECT: list[tuple[str, str, str]] = [
    (
        "Gastric ulcer",
        "Digestive",
        "A 64-year-old man taking naproxen for knee pain has had epigastric pain after meals and black tarry stools for two days. His haemoglobin has fallen from 13.8 to 10.1 g/dL. What is the most likely cause of these findings?",
    ),
    (
        "Hypercalcaemia of malignancy",
        "Endocrine",
        "A 68-year-old smoker with weight loss is confused and constipated. Serum calcium is 3.4 mmol/L and parathyroid hormone is suppressed. What most likely explains his confusion?",
    ),
    (
        "Carbon monoxide poisoning",
        "Nervous",
        "A family of four attend the emergency department in winter with headaches and nausea that improve when they leave home. What is the most likely cause of their symptoms?",
    ),
]

# Past the declared range ([stimuli] range = { first = 38 }): kept for later, never locked in.
RESERVED: list[tuple[str, str, str]] = [
    (
        "Tension pneumothorax",
        "Respiratory",
        "A 22-year-old man is stabbed in the left chest. He is breathless with a pulse of 140/min, blood pressure 80/50 mmHg, tracheal deviation to the right and absent breath sounds on the left. What is the most likely diagnosis?",
    ),
    (
        "Cushing syndrome",
        "Endocrine",
        "A 41-year-old woman has gained weight around the trunk, has purple abdominal striae, easy bruising and proximal weakness. Late-night salivary cortisol is raised. What is the most likely diagnosis?",
    ),
    (
        "Hodgkin lymphoma",
        "Hematologic",
        "A 25-year-old man has painless cervical lymphadenopathy, night sweats and itching; a node biopsy shows Reed-Sternberg cells. What is the most likely diagnosis?",
    ),
    (
        "Placental abruption",
        "Reproductive",
        "A 32-year-old woman at 34 weeks' gestation has sudden painful vaginal bleeding and a hard, tender uterus after a car accident. What is the most likely diagnosis?",
    ),
]

EXTRA = [
    "Sarcoidosis",
    "Tuberculosis",
    "Lung cancer",
    "Asthma",
    "Irritable bowel syndrome",
    "Coeliac disease",
    "Crohn disease",
    "Hepatitis A",
    "Pericarditis",
    "Myocarditis",
    "Cellulitis",
    "Lyme disease",
    "Bell palsy",
    "Parkinson disease",
    "Sickle cell crisis",
    "Thalassaemia trait",
    "Polymyalgia rheumatica",
    "Ankylosing spondylitis",
    "Endometriosis",
    "Pelvic inflammatory disease",
]
"""Further diagnoses that fill the option lists (none of them an answer)."""


def _draw(seed: str, pool: list[str], k: int) -> list[str]:
    """``k`` members of ``pool`` ordered by SHA-256 of ``seed|member`` (deterministic)."""
    keyed = sorted(pool, key=lambda x: hashlib.sha256(f"{seed}|{x}".encode()).hexdigest())
    return keyed[:k]


def _record(
    rid: str, question: str, answer: str, distractors: list[str], system: str, task: str
) -> dict[str, Any]:
    options = sorted(
        [answer, *distractors],
        key=lambda x: hashlib.sha256(f"{rid}|order|{x}".encode()).hexdigest(),
    )
    labelled = dict(zip(LABELS, options, strict=True))
    block = " ".join(f"({k}) {v}" for k, v in labelled.items())
    return {
        "id": rid,
        "question": f"{question}\nAnswer Choices: {block}",
        "options": labelled,
        "label": LABELS[options.index(answer)],
        "medical_task": task,
        "body_system": system,
        "question_type": "Reasoning",
    }


def records() -> list[dict[str, Any]]:
    """Every record of the data file, in file order (42: 38 in the declared range, 4 past it)."""
    answers = [c[0] for c in CASES]
    pool = sorted(set(answers + EXTRA + [c[1] for c in CASES]))
    out = []
    for n, (answer, confuser, system, patient, symptoms, tests) in enumerate(CASES, 1):
        rid = f"Syn-{n}"
        others = [d for d in pool if d not in (answer, confuser)]
        question = f"{patient} {symptoms} {tests} {ASK}"
        out.append(
            _record(rid, question, answer, [confuser, *_draw(rid, others, 8)], system, "Diagnosis")
        )
    n = len(out)
    for system, question, answer, distractors in NON_DIAGNOSTIC:
        n += 1
        out.append(_record(f"Syn-{n}", question, answer, distractors, system, "Treatment"))
    for answer, system, question in [*INDIRECT, *RESERVED]:
        n += 1
        rid = f"Syn-{n}"
        out.append(
            _record(
                rid,
                question,
                answer,
                _draw(rid, [d for d in pool if d != answer], 9),
                system,
                "Diagnosis",
            )
        )
    return out


def main() -> None:
    """Write the data file (UTF-8, one JSON object a line, keys in MedXpertQA's order)."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records())
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(records())} records)")


if __name__ == "__main__":
    main()
