import math
from datetime import date, timedelta
from typing import TypedDict


class PatientInfo(TypedDict):
    patient_id: str
    name: str
    date_of_birth: str
    phone: str
    allergies: list[str]  # allergen classes, e.g. "penicillin", "sulfa"
    insurance_plan_id: str | None


class PrescriberInfo(TypedDict):
    prescriber_id: str
    name: str
    license_status: str  # "active" | "suspended"
    dea_registered: bool


class DrugInfo(TypedDict):
    drug_id: str
    name: str
    strength: str
    form: str
    schedule: int | None  # controlled-substance schedule 2..5, None when not controlled
    allergen_class: str | None
    interacts_with: list[str]  # drug ids
    tier: int  # formulary tier 1..3
    unit_price: float
    stock: int


class PlanInfo(TypedDict):
    plan_id: str
    name: str
    copays: dict[str, float]  # formulary tier ("1", "2", "3") -> copay per fill


class PrescriptionInfo(TypedDict):
    rx_id: str
    patient_id: str
    prescriber_id: str
    drug_id: str
    quantity: int
    days_supply: int
    refills_authorized: int
    refills_used: int
    status: str  # "active" | "on_hold" | "cancelled" | "transferred_out"
    written_date: str
    expiration_date: str
    last_fill_date: str | None
    directions: str
    notes: list[str]


class FillInfo(TypedDict):
    fill_id: str
    rx_id: str
    fill_date: str
    quantity: int
    copay: float
    is_refill: bool
    previous_fill_date: str | None
    status: str  # "ready" | "picked_up" | "returned_to_stock"


NON_CONTROLLED_REFILL_FRACTION = 0.75
CONTROLLED_REFILL_FRACTION = 0.90


class PharmacyPrescriptions:
    def __init__(self, init_config: dict):
        """Create the pharmacy's state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-04-15")
        self.patients: dict[str, PatientInfo] = init_config.get("patients", {})
        self.prescribers: dict[str, PrescriberInfo] = init_config.get("prescribers", {})
        self.drugs: dict[str, DrugInfo] = init_config.get("drugs", {})
        self.insurance_plans: dict[str, PlanInfo] = init_config.get("insurance_plans", {})
        self.prescriptions: dict[str, PrescriptionInfo] = init_config.get("prescriptions", {})
        self.fills: dict[str, FillInfo] = init_config.get("fills", {})
        self.next_fill_number: int = init_config.get("next_fill_number", 1)

    # ------------------------------------------------------------------ helpers

    def _earliest_refill_date(self, rx: PrescriptionInfo) -> str | None:
        if rx["last_fill_date"] is None:
            return None
        controlled = self.drugs[rx["drug_id"]]["schedule"] is not None
        fraction = CONTROLLED_REFILL_FRACTION if controlled else NON_CONTROLLED_REFILL_FRACTION
        wait = math.ceil(rx["days_supply"] * fraction)
        return (date.fromisoformat(rx["last_fill_date"]) + timedelta(days=wait)).isoformat()

    def _fill_error(self, rx: PrescriptionInfo) -> str | None:
        """Why the prescription cannot be filled today, or None when it can."""
        drug = self.drugs[rx["drug_id"]]
        patient = self.patients[rx["patient_id"]]
        prescriber = self.prescribers[rx["prescriber_id"]]
        if rx["status"] != "active":
            return f"Prescription {rx['rx_id']} is {rx['status']}."
        if rx["expiration_date"] < self.current_date:
            return f"Prescription {rx['rx_id']} expired on {rx['expiration_date']}; a new prescription is needed."
        if prescriber["license_status"] != "active":
            return f"The prescriber {prescriber['name']} has a {prescriber['license_status']} licence."
        if drug["schedule"] is not None and not prescriber["dea_registered"]:
            return f"{prescriber['name']} is not registered to prescribe controlled substances."
        if rx["last_fill_date"] is not None:
            if drug["schedule"] == 2:
                return f"{drug['name']} is a schedule II drug and cannot be refilled; a new prescription is needed."
            if rx["refills_used"] >= rx["refills_authorized"]:
                return (
                    f"All {rx['refills_authorized']} authorized refills of {rx['rx_id']} are used; "
                    "a new prescription is needed."
                )
            earliest = self._earliest_refill_date(rx) or self.current_date
            if self.current_date < earliest:
                return f"Too early to refill {rx['rx_id']}: the earliest refill date is {earliest}."
        if drug["allergen_class"] is not None and drug["allergen_class"] in patient["allergies"]:
            return f"{patient['name']} is allergic to {drug['allergen_class']}; {drug['name']} cannot be dispensed."
        for other in self.prescriptions.values():
            if other["rx_id"] == rx["rx_id"] or other["patient_id"] != rx["patient_id"]:
                continue
            # Only drugs the patient is taking (filled before) block a new one.
            if other["status"] not in ("active", "on_hold") or other["last_fill_date"] is None:
                continue
            other_drug = self.drugs[other["drug_id"]]
            if other_drug["drug_id"] in drug["interacts_with"] or drug["drug_id"] in other_drug["interacts_with"]:
                return (
                    f"{drug['name']} interacts with {other_drug['name']} ({other['rx_id']}); put the prescription "
                    "on hold for prescriber review."
                )
        if drug["stock"] < rx["quantity"]:
            return f"Only {drug['stock']} units of {drug['name']} in stock; {rx['quantity']} needed."
        return None

    def _copay(self, rx: PrescriptionInfo) -> float:
        drug = self.drugs[rx["drug_id"]]
        plan_id = self.patients[rx["patient_id"]]["insurance_plan_id"]
        if plan_id is not None and plan_id in self.insurance_plans:
            return self.insurance_plans[plan_id]["copays"][str(drug["tier"])]
        return round(drug["unit_price"] * rx["quantity"], 2)

    # ------------------------------------------------------------------ queries

    def find_patients(self, name: str, date_of_birth: str | None = None) -> dict:
        """Search patients by (part of) name, optionally narrowed by date of birth.

        Args:
            name: Part of the patient's name (case-insensitive).
            date_of_birth: The date of birth, YYYY-MM-DD (optional).
        """
        needle = name.strip().lower()
        if not needle:
            return {"success": False, "error": "The name must not be empty."}
        rows = [
            p
            for p in self.patients.values()
            if needle in p["name"].lower() and (date_of_birth is None or p["date_of_birth"] == date_of_birth)
        ]
        return {"success": True, "data": rows}

    def get_patient(self, patient_id: str) -> dict:
        """Get one patient's profile, allergies and insurance.

        Args:
            patient_id: The patient's id, e.g. "P-401".
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        return {"success": True, "data": patient}

    def list_patient_prescriptions(self, patient_id: str) -> dict:
        """List a patient's prescriptions with the drug name.

        Args:
            patient_id: The patient's id.
        """
        if patient_id not in self.patients:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        rows = []
        for rx in self.prescriptions.values():
            if rx["patient_id"] == patient_id:
                row = dict(rx)
                row["drug_name"] = self.drugs[rx["drug_id"]]["name"]
                rows.append(row)
        return {"success": True, "data": rows}

    def get_prescription(self, rx_id: str) -> dict:
        """Get one prescription.

        Args:
            rx_id: The prescription number, e.g. "RX-7001".
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        return {"success": True, "data": rx}

    def get_drug(self, drug_id: str) -> dict:
        """Get a drug's details: schedule, allergen class, interactions, tier, price and stock.

        Args:
            drug_id: The drug's id, e.g. "D-10".
        """
        drug = self.drugs.get(drug_id)
        if drug is None:
            return {"success": False, "error": f"No drug with id {drug_id}."}
        return {"success": True, "data": drug}

    def search_drugs(self, name: str) -> dict:
        """Search the formulary by drug name (case-insensitive).

        Args:
            name: Part of the drug name, e.g. "amox".
        """
        needle = name.strip().lower()
        if not needle:
            return {"success": False, "error": "The name must not be empty."}
        return {"success": True, "data": [d for d in self.drugs.values() if needle in d["name"].lower()]}

    def get_insurance_plan(self, plan_id: str) -> dict:
        """Get an insurance plan's copays per formulary tier.

        Args:
            plan_id: The plan's id, e.g. "PLAN-A".
        """
        plan = self.insurance_plans.get(plan_id)
        if plan is None:
            return {"success": False, "error": f"No insurance plan {plan_id}."}
        return {"success": True, "data": plan}

    def list_fills(self, rx_id: str) -> dict:
        """List the fills of a prescription.

        Args:
            rx_id: The prescription number.
        """
        if rx_id not in self.prescriptions:
            return {"success": False, "error": f"No prescription {rx_id}."}
        return {"success": True, "data": [f for f in self.fills.values() if f["rx_id"] == rx_id]}

    def check_fill_eligibility(self, rx_id: str) -> dict:
        """Say whether a prescription can be filled today, why not, and the earliest refill date. Changes nothing.

        Args:
            rx_id: The prescription number.
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        error = self._fill_error(rx)
        return {
            "success": True,
            "data": {
                "eligible": error is None,
                "reason": error or "Eligible.",
                "refills_remaining": rx["refills_authorized"] - rx["refills_used"],
                "earliest_refill_date": self._earliest_refill_date(rx),
                "copay": self._copay(rx),
            },
        }

    # ------------------------------------------------------------------ dispensing

    def fill_prescription(self, rx_id: str) -> dict:
        """Dispense a prescription (first fill or refill) and leave it ready for pickup.

        Args:
            rx_id: The prescription number.
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        error = self._fill_error(rx)
        if error is not None:
            return {"success": False, "error": error}
        is_refill = rx["last_fill_date"] is not None
        fill_id = f"F-{self.next_fill_number}"
        self.next_fill_number += 1
        copay = self._copay(rx)
        self.fills[fill_id] = {
            "fill_id": fill_id,
            "rx_id": rx_id,
            "fill_date": self.current_date,
            "quantity": rx["quantity"],
            "copay": copay,
            "is_refill": is_refill,
            "previous_fill_date": rx["last_fill_date"],
            "status": "ready",
        }
        self.drugs[rx["drug_id"]]["stock"] -= rx["quantity"]
        if is_refill:
            rx["refills_used"] += 1
        rx["last_fill_date"] = self.current_date
        return {"success": True, "data": {"fill_id": fill_id, "copay": copay, "is_refill": is_refill}}

    def record_pickup(self, fill_id: str, date_of_birth: str) -> dict:
        """Hand a ready fill to the patient after verifying their date of birth.

        Args:
            fill_id: The fill, e.g. "F-12".
            date_of_birth: The date of birth the person at the counter gives, YYYY-MM-DD.
        """
        fill = self.fills.get(fill_id)
        if fill is None:
            return {"success": False, "error": f"No fill {fill_id}."}
        if fill["status"] != "ready":
            return {"success": False, "error": f"Fill {fill_id} is {fill['status']}, not ready for pickup."}
        patient = self.patients[self.prescriptions[fill["rx_id"]]["patient_id"]]
        if patient["date_of_birth"] != date_of_birth:
            return {
                "success": False,
                "error": "The date of birth does not match the patient; pickup refused.",
            }
        fill["status"] = "picked_up"
        return {"success": True, "message": f"Fill {fill_id} picked up; copay {fill['copay']:.2f} collected."}

    def return_fill_to_stock(self, fill_id: str) -> dict:
        """Put a ready fill that was not picked up back on the shelf; the fill no longer counts.

        Args:
            fill_id: The fill to return to stock.
        """
        fill = self.fills.get(fill_id)
        if fill is None:
            return {"success": False, "error": f"No fill {fill_id}."}
        if fill["status"] != "ready":
            return {
                "success": False,
                "error": f"Fill {fill_id} is {fill['status']}; only ready fills can be returned.",
            }
        rx = self.prescriptions[fill["rx_id"]]
        if rx["last_fill_date"] != fill["fill_date"]:
            return {"success": False, "error": f"Fill {fill_id} is not the latest fill of {rx['rx_id']}."}
        fill["status"] = "returned_to_stock"
        self.drugs[rx["drug_id"]]["stock"] += fill["quantity"]
        if fill["is_refill"]:
            rx["refills_used"] -= 1
        rx["last_fill_date"] = fill["previous_fill_date"]
        return {"success": True, "message": f"Fill {fill_id} returned to stock."}

    # ------------------------------------------------------------------ prescription status

    def put_prescription_on_hold(self, rx_id: str, reason: str) -> dict:
        """Put an active prescription on hold, e.g. for prescriber review.

        Args:
            rx_id: The prescription number.
            reason: Why it is held.
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        if rx["status"] != "active":
            return {
                "success": False,
                "error": f"Prescription {rx_id} is {rx['status']}; only active ones can be held.",
            }
        if not reason.strip():
            return {"success": False, "error": "A reason is required."}
        rx["status"] = "on_hold"
        rx["notes"].append(f"{self.current_date} hold: {reason}")
        return {"success": True, "message": f"Prescription {rx_id} is on hold."}

    def release_prescription_hold(self, rx_id: str) -> dict:
        """Make a held prescription active again.

        Args:
            rx_id: The prescription number.
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        if rx["status"] != "on_hold":
            return {"success": False, "error": f"Prescription {rx_id} is {rx['status']}, not on hold."}
        rx["status"] = "active"
        rx["notes"].append(f"{self.current_date} hold released")
        return {"success": True, "message": f"Prescription {rx_id} is active again."}

    def cancel_prescription(self, rx_id: str, reason: str) -> dict:
        """Cancel an active or held prescription at the patient's or prescriber's request. This is final.

        Args:
            rx_id: The prescription number.
            reason: Why it is cancelled.
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        if rx["status"] not in ("active", "on_hold"):
            return {
                "success": False,
                "error": f"Prescription {rx_id} is {rx['status']} and cannot be cancelled.",
            }
        if not reason.strip():
            return {"success": False, "error": "A reason is required."}
        rx["status"] = "cancelled"
        rx["notes"].append(f"{self.current_date} cancelled: {reason}")
        return {"success": True, "message": f"Prescription {rx_id} cancelled."}

    def transfer_prescription_out(self, rx_id: str, pharmacy_name: str) -> dict:
        """Transfer the remaining refills of a non-controlled prescription to another pharmacy. This is final.

        Args:
            rx_id: The prescription number.
            pharmacy_name: The receiving pharmacy.
        """
        rx = self.prescriptions.get(rx_id)
        if rx is None:
            return {"success": False, "error": f"No prescription {rx_id}."}
        if rx["status"] != "active":
            return {
                "success": False,
                "error": f"Prescription {rx_id} is {rx['status']}; only active ones can move.",
            }
        drug = self.drugs[rx["drug_id"]]
        if drug["schedule"] is not None:
            return {
                "success": False,
                "error": f"{drug['name']} is a controlled substance and cannot be transferred.",
            }
        if rx["expiration_date"] < self.current_date:
            return {"success": False, "error": f"Prescription {rx_id} has expired."}
        if rx["last_fill_date"] is not None and rx["refills_used"] >= rx["refills_authorized"]:
            return {"success": False, "error": f"Prescription {rx_id} has no fills left to transfer."}
        if not pharmacy_name.strip():
            return {"success": False, "error": "The receiving pharmacy is required."}
        rx["status"] = "transferred_out"
        rx["notes"].append(f"{self.current_date} transferred to {pharmacy_name}")
        return {"success": True, "message": f"Prescription {rx_id} transferred to {pharmacy_name}."}

    # ------------------------------------------------------------------ patient profile

    def add_patient_allergy(self, patient_id: str, allergen_class: str) -> dict:
        """Record an allergy on a patient's profile.

        Args:
            patient_id: The patient.
            allergen_class: The allergen class, e.g. "penicillin", "sulfa", "nsaid".
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        allergen = allergen_class.strip().lower()
        if not allergen:
            return {"success": False, "error": "The allergen class must not be empty."}
        if allergen in patient["allergies"]:
            return {"success": False, "error": f"{patient['name']} already has {allergen} recorded."}
        patient["allergies"].append(allergen)
        return {"success": True, "message": f"Allergy to {allergen} recorded for {patient_id}."}

    def update_patient_insurance(self, patient_id: str, plan_id: str | None = None) -> dict:
        """Set a patient's insurance plan, or remove it when no plan is given. Past fills keep their copay.

        Args:
            patient_id: The patient.
            plan_id: The new plan's id; omit to record the patient as uninsured (optional).
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        if plan_id is not None and plan_id not in self.insurance_plans:
            return {"success": False, "error": f"No insurance plan {plan_id}."}
        if patient["insurance_plan_id"] == plan_id:
            return {"success": False, "error": f"{patient['name']} already has that insurance setting."}
        patient["insurance_plan_id"] = plan_id
        return {"success": True, "message": f"Insurance of {patient_id} set to {plan_id}."}

    def update_patient_phone(self, patient_id: str, phone: str) -> dict:
        """Change a patient's phone number.

        Args:
            patient_id: The patient.
            phone: The new phone number.
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"No patient with id {patient_id}."}
        if not phone.strip():
            return {"success": False, "error": "The phone number must not be empty."}
        patient["phone"] = phone
        return {"success": True, "message": f"Phone of {patient_id} updated."}
