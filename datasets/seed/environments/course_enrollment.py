from typing import TypedDict


class StudentInfo(TypedDict):
    student_id: str
    name: str
    email: str
    program: str  # department code of the student's major, e.g. "CS"
    year: int
    status: str  # "active" | "suspended" | "graduated"
    holds: list[str]  # e.g. "advising", "financial", "immunization"
    completed_courses: dict[str, str]  # course code -> final grade
    max_credits: int


class CourseInfo(TypedDict):
    course_code: str
    title: str
    department: str
    credits: int
    prerequisites: list[str]


class SectionInfo(TypedDict):
    section_id: str
    course_code: str
    term: str
    instructor: str
    capacity: int
    days: str  # letters of the meeting days: M T W R F
    start_time: str  # "HH:MM"
    end_time: str
    status: str  # "open" | "cancelled"


class EnrollmentInfo(TypedDict):
    enrollment_id: str
    student_id: str
    section_id: str
    status: str  # "enrolled" | "waitlisted" | "dropped" | "withdrawn"
    grade_mode: str  # "letter" | "pass_fail"
    registered_date: str


PASSING_PREREQUISITE_GRADES = ("A", "A-", "B+", "B", "B-", "C+", "C", "C-", "P")
CURRENT_STATUSES = ("enrolled", "waitlisted")
OVERLOAD_CREDITS = 21
OVERLOAD_MIN_YEAR = 3


def _overlaps(a: SectionInfo, b: SectionInfo) -> bool:
    shares_day = any(day in b["days"] for day in a["days"])
    return shares_day and a["start_time"] < b["end_time"] and b["start_time"] < a["end_time"]


class CourseEnrollment:
    def __init__(self, init_config: dict):
        """Create the registrar's state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-08-28")
        self.current_term: str = init_config.get("current_term", "2026-FA")
        self.add_drop_deadline: str = init_config.get("add_drop_deadline", "2026-09-04")
        self.withdrawal_deadline: str = init_config.get("withdrawal_deadline", "2026-10-30")
        self.students: dict[str, StudentInfo] = init_config.get("students", {})
        self.courses: dict[str, CourseInfo] = init_config.get("courses", {})
        self.sections: dict[str, SectionInfo] = init_config.get("sections", {})
        self.enrollments: dict[str, EnrollmentInfo] = init_config.get("enrollments", {})
        self.next_enrollment_number: int = init_config.get("next_enrollment_number", 1)

    # ------------------------------------------------------------------ helpers

    def _current(self, student_id: str) -> list[EnrollmentInfo]:
        """The student's enrolled or waitlisted registrations in the current term, oldest first."""
        rows = [
            e
            for e in self.enrollments.values()
            if e["student_id"] == student_id
            and e["status"] in CURRENT_STATUSES
            and self.sections[e["section_id"]]["term"] == self.current_term
        ]
        rows.sort(key=lambda e: int(e["enrollment_id"].split("-")[1]))
        return rows

    def _seats_taken(self, section_id: str) -> int:
        return sum(1 for e in self.enrollments.values() if e["section_id"] == section_id and e["status"] == "enrolled")

    def _waitlist(self, section_id: str) -> list[EnrollmentInfo]:
        rows = [e for e in self.enrollments.values() if e["section_id"] == section_id and e["status"] == "waitlisted"]
        rows.sort(key=lambda e: int(e["enrollment_id"].split("-")[1]))
        return rows

    def _registration_error(self, student_id: str, section_id: str, ignore_enrollment_id: str | None) -> str | None:
        """Why the student may not register for the section (capacity aside), or None."""
        student = self.students.get(student_id)
        if student is None:
            return f"No student with id {student_id}."
        section = self.sections.get(section_id)
        if section is None:
            return f"No section with id {section_id}."
        if student["status"] != "active":
            return f"Student {student_id} is {student['status']}; only active students can register."
        if student["holds"]:
            return f"Student {student_id} has holds ({', '.join(student['holds'])}) that block registration."
        if section["term"] != self.current_term:
            return f"Section {section_id} is not offered in the current term {self.current_term}."
        if section["status"] != "open":
            return f"Section {section_id} is {section['status']}."
        if self.current_date > self.add_drop_deadline:
            return f"The add/drop deadline ({self.add_drop_deadline}) has passed."
        course = self.courses[section["course_code"]]
        if student["completed_courses"].get(course["course_code"]) in PASSING_PREREQUISITE_GRADES:
            return f"{student['name']} has already passed {course['course_code']}."
        missing = [
            code
            for code in course["prerequisites"]
            if student["completed_courses"].get(code) not in PASSING_PREREQUISITE_GRADES
        ]
        if missing:
            return (
                f"{course['course_code']} requires {', '.join(missing)} with a grade of C- or better, "
                f"which {student['name']} has not completed."
            )
        current = [e for e in self._current(student_id) if e["enrollment_id"] != ignore_enrollment_id]
        credits = 0
        for registration in current:
            other = self.sections[registration["section_id"]]
            if other["course_code"] == course["course_code"]:
                return f"{student['name']} is already registered for {course['course_code']} ({other['section_id']})."
            if _overlaps(section, other):
                return (
                    f"Section {section_id} clashes with {other['section_id']} ({other['days']} {other['start_time']})."
                )
            credits += self.courses[other["course_code"]]["credits"]
        if credits + course["credits"] > student["max_credits"]:
            return (
                f"Registering would bring {student['name']} to {credits + course['credits']} credits; "
                f"the limit is {student['max_credits']}."
            )
        return None

    def _new_enrollment(self, student_id: str, section_id: str, status: str) -> str:
        enrollment_id = f"EN-{self.next_enrollment_number}"
        self.next_enrollment_number += 1
        self.enrollments[enrollment_id] = {
            "enrollment_id": enrollment_id,
            "student_id": student_id,
            "section_id": section_id,
            "status": status,
            "grade_mode": "letter",
            "registered_date": self.current_date,
        }
        return enrollment_id

    def _promote_waitlist(self, section_id: str) -> str | None:
        section = self.sections[section_id]
        waiting = self._waitlist(section_id)
        if waiting and self._seats_taken(section_id) < section["capacity"]:
            waiting[0]["status"] = "enrolled"
            return waiting[0]["student_id"]
        return None

    # ------------------------------------------------------------------ queries

    def find_students(self, query: str) -> dict:
        """Search students whose name or email contains the query (case-insensitive).

        Args:
            query: Part of a name or an email address.
        """
        needle = query.strip().lower()
        if not needle:
            return {"success": False, "error": "The search query must not be empty."}
        rows = [s for s in self.students.values() if needle in s["name"].lower() or needle in s["email"].lower()]
        return {"success": True, "data": rows}

    def get_student(self, student_id: str) -> dict:
        """Get a student's record: program, year, status, holds, completed courses and credit limit.

        Args:
            student_id: The student's id, e.g. "S-301".
        """
        student = self.students.get(student_id)
        if student is None:
            return {"success": False, "error": f"No student with id {student_id}."}
        return {"success": True, "data": student}

    def get_course(self, course_code: str) -> dict:
        """Get a course's title, department, credits and prerequisites.

        Args:
            course_code: The course code, e.g. "CS201".
        """
        course = self.courses.get(course_code)
        if course is None:
            return {"success": False, "error": f"No course {course_code}."}
        return {"success": True, "data": course}

    def search_sections(self, course_code: str | None = None, department: str | None = None) -> dict:
        """List current-term sections with free seats and waitlist length, filtered by course or department.

        Args:
            course_code: Only sections of this course (optional).
            department: Only sections of courses of this department, e.g. "MATH" (optional).
        """
        rows = []
        for section in self.sections.values():
            if section["term"] != self.current_term:
                continue
            course = self.courses[section["course_code"]]
            if course_code is not None and section["course_code"] != course_code:
                continue
            if department is not None and course["department"] != department:
                continue
            row = dict(section)
            row["title"] = course["title"]
            row["credits"] = course["credits"]
            row["seats_left"] = section["capacity"] - self._seats_taken(section["section_id"])
            row["waitlist_length"] = len(self._waitlist(section["section_id"]))
            rows.append(row)
        return {"success": True, "data": rows}

    def get_section(self, section_id: str) -> dict:
        """Get one section with its free seats and waitlist length.

        Args:
            section_id: The section's id, e.g. "CS201-01".
        """
        section = self.sections.get(section_id)
        if section is None:
            return {"success": False, "error": f"No section with id {section_id}."}
        row = dict(section)
        row["seats_left"] = section["capacity"] - self._seats_taken(section_id)
        row["waitlist_length"] = len(self._waitlist(section_id))
        return {"success": True, "data": row}

    def list_student_schedule(self, student_id: str) -> dict:
        """List a student's registrations in the current term (any status) and their registered credits.

        Args:
            student_id: The student's id.
        """
        if student_id not in self.students:
            return {"success": False, "error": f"No student with id {student_id}."}
        rows = []
        for enrollment in self.enrollments.values():
            section = self.sections[enrollment["section_id"]]
            if enrollment["student_id"] != student_id or section["term"] != self.current_term:
                continue
            row = dict(enrollment)
            row["course_code"] = section["course_code"]
            row["days"] = section["days"]
            row["start_time"] = section["start_time"]
            row["end_time"] = section["end_time"]
            rows.append(row)
        credits = sum(
            self.courses[self.sections[e["section_id"]]["course_code"]]["credits"] for e in self._current(student_id)
        )
        return {"success": True, "data": {"registrations": rows, "registered_credits": credits}}

    def check_eligibility(self, student_id: str, section_id: str) -> dict:
        """Say whether a student may register for a section now, and why not if not. Changes nothing.

        Args:
            student_id: The student.
            section_id: The section.
        """
        error = self._registration_error(student_id, section_id, None)
        if error is not None:
            return {"success": True, "data": {"eligible": False, "reason": error}}
        full = self._seats_taken(section_id) >= self.sections[section_id]["capacity"]
        reason = "The section is full; the student may join the waitlist." if full else "Eligible."
        return {"success": True, "data": {"eligible": not full, "reason": reason}}

    # ------------------------------------------------------------------ registration changes

    def enroll_in_section(self, student_id: str, section_id: str) -> dict:
        """Enroll a student in a section that has a free seat.

        Args:
            student_id: The student.
            section_id: The section.
        """
        error = self._registration_error(student_id, section_id, None)
        if error is not None:
            return {"success": False, "error": error}
        if self._seats_taken(section_id) >= self.sections[section_id]["capacity"]:
            return {
                "success": False,
                "error": f"Section {section_id} is full; the student can join its waitlist.",
            }
        enrollment_id = self._new_enrollment(student_id, section_id, "enrolled")
        return {"success": True, "data": {"enrollment_id": enrollment_id, "status": "enrolled"}}

    def join_waitlist(self, student_id: str, section_id: str) -> dict:
        """Put a student on the waitlist of a full section.

        Args:
            student_id: The student.
            section_id: The full section.
        """
        error = self._registration_error(student_id, section_id, None)
        if error is not None:
            return {"success": False, "error": error}
        if self._seats_taken(section_id) < self.sections[section_id]["capacity"]:
            return {"success": False, "error": f"Section {section_id} has free seats; enroll instead."}
        enrollment_id = self._new_enrollment(student_id, section_id, "waitlisted")
        position = len(self._waitlist(section_id))
        return {"success": True, "data": {"enrollment_id": enrollment_id, "waitlist_position": position}}

    def drop_enrollment(self, enrollment_id: str) -> dict:
        """Drop a registration: before add/drop it is removed, until the withdrawal deadline it becomes a W.

        Args:
            enrollment_id: The registration to drop, e.g. "EN-12".
        """
        enrollment = self.enrollments.get(enrollment_id)
        if enrollment is None:
            return {"success": False, "error": f"No enrollment with id {enrollment_id}."}
        if enrollment["status"] not in CURRENT_STATUSES:
            return {
                "success": False,
                "error": f"Enrollment {enrollment_id} is already {enrollment['status']}.",
            }
        if enrollment["status"] == "waitlisted" or self.current_date <= self.add_drop_deadline:
            new_status = "dropped"
        elif self.current_date <= self.withdrawal_deadline:
            new_status = "withdrawn"
        else:
            return {
                "success": False,
                "error": f"The withdrawal deadline ({self.withdrawal_deadline}) has passed.",
            }
        was_enrolled = enrollment["status"] == "enrolled"
        enrollment["status"] = new_status
        promoted = self._promote_waitlist(enrollment["section_id"]) if was_enrolled else None
        return {
            "success": True,
            "data": {"enrollment_id": enrollment_id, "status": new_status, "promoted_student": promoted},
        }

    def swap_section(self, enrollment_id: str, new_section_id: str) -> dict:
        """Move an enrolled student to another section of the same course in one step.

        Args:
            enrollment_id: The current enrollment.
            new_section_id: The section to move to; it must have a free seat.
        """
        enrollment = self.enrollments.get(enrollment_id)
        if enrollment is None:
            return {"success": False, "error": f"No enrollment with id {enrollment_id}."}
        if enrollment["status"] != "enrolled":
            return {
                "success": False,
                "error": f"Enrollment {enrollment_id} is {enrollment['status']}, not enrolled.",
            }
        old_section = self.sections[enrollment["section_id"]]
        new_section = self.sections.get(new_section_id)
        if new_section is None:
            return {"success": False, "error": f"No section with id {new_section_id}."}
        if new_section["course_code"] != old_section["course_code"] or new_section_id == old_section["section_id"]:
            return {
                "success": False,
                "error": f"Section {new_section_id} is not another section of {old_section['course_code']}.",
            }
        error = self._registration_error(enrollment["student_id"], new_section_id, enrollment_id)
        if error is not None:
            return {"success": False, "error": error}
        if self._seats_taken(new_section_id) >= new_section["capacity"]:
            return {"success": False, "error": f"Section {new_section_id} is full."}
        enrollment["status"] = "dropped"
        new_id = self._new_enrollment(enrollment["student_id"], new_section_id, "enrolled")
        self.enrollments[new_id]["grade_mode"] = enrollment["grade_mode"]
        promoted = self._promote_waitlist(old_section["section_id"])
        return {"success": True, "data": {"enrollment_id": new_id, "promoted_student": promoted}}

    def set_grade_mode(self, enrollment_id: str, grade_mode: str) -> dict:
        """Choose letter or pass/fail grading for an enrollment, before the add/drop deadline.

        Args:
            enrollment_id: The enrollment.
            grade_mode: "letter" or "pass_fail".
        """
        enrollment = self.enrollments.get(enrollment_id)
        if enrollment is None:
            return {"success": False, "error": f"No enrollment with id {enrollment_id}."}
        if grade_mode not in ("letter", "pass_fail"):
            return {"success": False, "error": "The grade mode must be letter or pass_fail."}
        if enrollment["status"] != "enrolled":
            return {
                "success": False,
                "error": f"Enrollment {enrollment_id} is {enrollment['status']}, not enrolled.",
            }
        if self.current_date > self.add_drop_deadline:
            return {
                "success": False,
                "error": f"The grade mode cannot change after {self.add_drop_deadline}.",
            }
        course = self.courses[self.sections[enrollment["section_id"]]["course_code"]]
        student = self.students[enrollment["student_id"]]
        if grade_mode == "pass_fail" and course["department"] == student["program"]:
            return {
                "success": False,
                "error": f"{course['course_code']} is in the student's own program; it must be letter graded.",
            }
        if enrollment["grade_mode"] == grade_mode:
            return {"success": False, "error": f"Enrollment {enrollment_id} is already {grade_mode}."}
        enrollment["grade_mode"] = grade_mode
        return {"success": True, "message": f"Enrollment {enrollment_id} is now {grade_mode}."}

    def clear_advising_hold(self, student_id: str) -> dict:
        """Clear a student's advising hold once they confirm they met their advisor. Other holds stay.

        Args:
            student_id: The student.
        """
        student = self.students.get(student_id)
        if student is None:
            return {"success": False, "error": f"No student with id {student_id}."}
        if "advising" not in student["holds"]:
            return {"success": False, "error": f"Student {student_id} has no advising hold."}
        student["holds"].remove("advising")
        return {"success": True, "message": f"Advising hold cleared; remaining holds: {student['holds']}."}

    def approve_credit_overload(self, student_id: str) -> dict:
        """Raise an active year-3+ student's credit limit to 21; students with holds are not eligible.

        Args:
            student_id: The student.
        """
        student = self.students.get(student_id)
        if student is None:
            return {"success": False, "error": f"No student with id {student_id}."}
        if student["status"] != "active" or student["holds"]:
            return {"success": False, "error": f"Student {student_id} must be active and without holds."}
        if student["year"] < OVERLOAD_MIN_YEAR:
            return {
                "success": False,
                "error": f"Credit overloads are only for year {OVERLOAD_MIN_YEAR} and above.",
            }
        if student["max_credits"] >= OVERLOAD_CREDITS:
            return {
                "success": False,
                "error": f"Student {student_id} already has a limit of {student['max_credits']}.",
            }
        student["max_credits"] = OVERLOAD_CREDITS
        return {"success": True, "message": f"Credit limit of {student_id} raised to {OVERLOAD_CREDITS}."}
